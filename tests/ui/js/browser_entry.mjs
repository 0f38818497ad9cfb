// The protocols' clients for the browser page of tests/ui/test_browser.py, bundled by esbuild.
export { DefaultChatTransport, readUIMessageStream } from "ai";
export { HttpAgent } from "@ag-ui/client";
