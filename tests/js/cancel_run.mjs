// Cancel a running run with the official LangGraph JS SDK, waiting for it (`?wait=1`), and
// read the run right after the SDK's call returns, as an app would.
//
//   node cancel_run.mjs <apiUrl> <assistant> <input_json> <config_json> <cancel_after_ms>
//
// Prints one JSON line {"run_id", "thread_id", "cancelled": <what runs.cancel resolved to>,
// "status": <runs.get's status right after>} and exits 0; on an error it prints it to stderr
// and exits 1. Run by tests/test_langgraph_js.py.
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, assistant, input, config, after] = process.argv.slice(2);
if (!apiUrl || !assistant || !input || !config || after === undefined) {
  console.error("usage: node cancel_run.mjs <apiUrl> <assistant> <input> <config> <ms>");
  process.exit(2);
}

try {
  const client = new Client({ apiUrl });
  const thread = await client.threads.create();
  const run = await client.runs.create(thread.thread_id, assistant, {
    input: JSON.parse(input),
    config: JSON.parse(config),
  });
  await new Promise((resolve) => setTimeout(resolve, Number(after)));
  const before = (await client.runs.get(thread.thread_id, run.run_id)).status;
  const cancelled = await client.runs.cancel(thread.thread_id, run.run_id, true);
  const status = (await client.runs.get(thread.thread_id, run.run_id)).status;
  process.stdout.write(
    `${JSON.stringify({
      run_id: run.run_id,
      thread_id: thread.thread_id,
      before,
      cancelled: cancelled ?? null,
      status,
    })}\n`,
  );
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
