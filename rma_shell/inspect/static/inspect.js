// rma inspect: follow the journal live. Every second, ask the server for the page's version
// (the number of records); when it changed, fetch the page again and swap its content in.
// Nothing else: the pages are complete without this script.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !live.dataset.poll) return;
  var busy = false;
  function typing() {
    var a = document.activeElement;
    return a && a.tagName === "INPUT" && a.type === "text" && a.value !== "";
  }
  function tick() {
    if (busy || typing()) return;
    busy = true;
    fetch(live.dataset.poll, { cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (v) {
        if (v === null || v === live.dataset.version) return null;
        return fetch(location.href, { cache: "no-store" }).then(function (r) { return r.text(); });
      })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) return;
        live.innerHTML = fresh.innerHTML;
        live.dataset.version = fresh.dataset.version;
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  setInterval(tick, 1000);
})();
