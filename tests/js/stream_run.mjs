// Stream one run of the `chat` graph with the official LangGraph JS SDK, as an app would.
//
//   node stream_run.mjs <apiUrl> <message> <fake_token_delay_ms>
//
// Prints one JSON line {"run_id", "thread_id"} once the run exists, then one JSON line
// {"event", "data", "id"} per part the SDK yields (it reconnects by itself when the
// connection drops), and exits 0. On an error it prints the error to stderr and exits 1.
// Run by tests/test_langgraph_js.py.
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, message, delay] = process.argv.slice(2);
if (!apiUrl || message === undefined || delay === undefined) {
  console.error("usage: node stream_run.mjs <apiUrl> <message> <fake_token_delay_ms>");
  process.exit(2);
}

function print(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

try {
  const client = new Client({ apiUrl });
  const thread = await client.threads.create();
  const parts = client.runs.stream(thread.thread_id, "chat", {
    input: { messages: [{ type: "human", content: message }] },
    streamMode: ["values", "messages-tuple"],
    config: { configurable: { fake_token_delay_ms: Number(delay) } },
    onRunCreated: ({ run_id, thread_id }) => print({ run_id, thread_id }),
  });
  for await (const part of parts) {
    print({ event: part.event, data: part.data, id: part.id ?? null });
  }
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  if (error?.cause) console.error("cause:", error.cause?.stack ?? String(error.cause));
  process.exit(1);
}
