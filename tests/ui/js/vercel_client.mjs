// The AI SDK's own client side (what useChat runs): DefaultChatTransport posts the messages and
// parses the UI message stream, validating each chunk with the SDK's schema, and
// readUIMessageStream folds the chunks into the assistant message. With "approve", a
// tool-approval-request is answered as addToolApprovalResponse does and sent back, continuing
// the same assistant message.
// Usage: node vercel_client.mjs URL PROMPT [approve|deny]  → one JSON line: {messages: [...]}
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [api, prompt, decision] = process.argv.slice(2);
const transport = new DefaultChatTransport({ api });
const user = { id: "u1", role: "user", parts: [{ type: "text", text: prompt }] };

async function send(messages, continuing) {
  const stream = await transport.sendMessages({
    chatId: "chat-js",
    messages,
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  let last;
  for await (const message of readUIMessageStream({
    stream,
    message: continuing,
    terminateOnError: true,
  })) {
    last = message;
  }
  return last;
}

try {
  const first = await send([user]);
  const out = [first];
  const waiting = first.parts.filter((p) => p.state === "approval-requested");
  if (decision && waiting.length) {
    const answered = structuredClone(first);
    for (const part of answered.parts) {
      if (part.state === "approval-requested") {
        part.state = "approval-responded";
        part.approval = { id: part.approval.id, approved: decision === "approve", reason: "by the test" };
      }
    }
    out.push(await send([user, answered], answered));
  }
  console.log(JSON.stringify({ messages: out }));
} catch (error) {
  console.log(JSON.stringify({ failed: String(error?.message ?? error) }));
}
