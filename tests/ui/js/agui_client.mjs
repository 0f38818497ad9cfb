// AG-UI's own client (@ag-ui/client HttpAgent) runs an agent served by rma: it verifies the
// event stream against the protocol and folds it into messages. With "approve", a run that
// ends in an interrupt is resumed with an approval, as an application would.
// Usage: node agui_client.mjs URL PROMPT [approve]   → one JSON line: {runs: [...], messages}
import { HttpAgent } from "@ag-ui/client";

const [url, prompt, approve] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  threadId: "thread-js",
  initialMessages: [{ id: "u1", role: "user", content: prompt }],
});
const runs = [];
const subscriber = {
  onRunFinishedEvent({ outcome, interrupts, result }) {
    runs.push({ outcome, result, interrupts: interrupts ?? [] });
  },
  onRunErrorEvent({ event }) {
    runs.push({ outcome: "error", message: event.message, code: event.code });
  },
};
try {
  await agent.runAgent({ runId: "run-1" }, subscriber);
  if (approve && agent.pendingInterrupts.length) {
    const resume = agent.pendingInterrupts.map((i) => ({
      interruptId: i.id,
      status: "resolved",
      payload: { approved: approve === "approve" },
    }));
    await agent.runAgent({ runId: "run-2", resume }, subscriber);
  }
  console.log(JSON.stringify({ runs, messages: agent.messages }));
} catch (error) {
  console.log(JSON.stringify({ runs, failed: String(error?.message ?? error) }));
}
