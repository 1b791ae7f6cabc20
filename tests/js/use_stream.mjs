// Drive the LangGraph JS SDK's React hook, `useStream`, against runstream, as a chat UI built
// on it (agent-chat-ui, for one) does: rendered by react-test-renderer under node, no browser.
//
//   node use_stream.mjs <apiUrl> <apiKey> chat <message> <fake_token_delay_ms>
//   node use_stream.mjs <apiUrl> <apiKey> reload <message> <fake_token_delay_ms> <words_before>
//   node use_stream.mjs <apiUrl> <apiKey> interrupt <message>
//
// chat: submit one message and wait for the answer. reload: submit with `reconnectOnMount`,
// unmount the component once the answer shows <words_before> words (a closed tab), mount a new
// one on the same thread and storage (the reloaded page), which must rejoin the run by itself.
// interrupt: the `approval` graph pauses; the hook shows the interrupt; resume it with a
// `Command` carrying an approve decision and wait for the end. Prints one JSON line per observation and exits 0; on an
// error prints it to stderr and exits 1. Run by tests/test_langgraph_js.py.
import React from "react";
import TestRenderer, { act } from "react-test-renderer";
import { useStream } from "@langchain/langgraph-sdk/react";

const [apiUrl, apiKey, mode, message, delay, wordsBefore] = process.argv.slice(2);
const TIMEOUT_MS = 60_000;

// The hook keeps the id of a run it streams in `sessionStorage` (reconnectOnMount); a page
// reload keeps that storage, so both mounts below share this one.
class MemoryStorage {
  #items = new Map();
  getItem(key) {
    return this.#items.has(key) ? this.#items.get(key) : null;
  }
  setItem(key, value) {
    this.#items.set(key, String(value));
  }
  removeItem(key) {
    this.#items.delete(key);
  }
}
globalThis.window ??= globalThis;
globalThis.IS_REACT_ACT_ENVIRONMENT = false;

function print(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

function mount(options) {
  const seen = { current: null, errors: [] };
  function App() {
    const stream = useStream({ ...options, onError: (error) => seen.errors.push(String(error)) });
    // A UI renders the messages; reading them is what asks the hook for token-level modes.
    void stream.messages;
    seen.current = stream;
    return null;
  }
  let renderer;
  act(() => {
    renderer = TestRenderer.create(React.createElement(App));
  });
  return { seen, unmount: () => act(() => renderer.unmount()) };
}

async function until(seen, predicate, what) {
  const deadline = Date.now() + TIMEOUT_MS;
  while (!(seen.current && predicate(seen.current))) {
    if (seen.errors.length) throw new Error(`useStream error while waiting for ${what}: ${seen.errors}`);
    if (Date.now() > deadline) {
      const last = seen.current && { isLoading: seen.current.isLoading, messages: shown(seen.current) };
      throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return seen.current;
}

function text(content) {
  return typeof content === "string" ? content : content.map((part) => part.text ?? "").join("");
}

function shown(stream) {
  return stream.messages.map((m) => ({ type: m.type, id: m.id, content: text(m.content) }));
}

const answered = (count) => (stream) => !stream.isLoading && stream.messages.length === count;

try {
  const storage = new MemoryStorage();
  let threadId = null;
  const options = {
    apiUrl,
    apiKey,
    assistantId: mode === "interrupt" ? "approval" : "chat",
    reconnectOnMount: () => storage,
    onThreadId: (id) => {
      threadId = id;
    },
  };
  const config = { configurable: { fake_token_delay_ms: Number(delay ?? 0) } };
  const input = { messages: [{ type: "human", content: message }] };

  if (mode === "chat") {
    const page = mount(options);
    page.seen.current.submit(input, { config });
    const done = await until(page.seen, answered(2), "the answer");
    print({ thread_id: threadId, messages: shown(done) });
    page.unmount();
  } else if (mode === "reload") {
    const first = mount(options);
    // As a UI does: not awaited; the hook's state tells when it is done.
    first.seen.current.submit(input, { config });
    const before = await until(
      first.seen,
      (s) => s.messages.length === 2 && text(s.messages[1].content).split(" ").length >= Number(wordsBefore),
      `${wordsBefore} words of the answer`,
    );
    const runId = storage.getItem(`lg:stream:${threadId}`);
    print({ thread_id: threadId, run_id: runId, before: shown(before) });
    first.unmount();
    // The reloaded page: a new hook on the same thread, the run id still in the storage.
    const second = mount({ ...options, threadId });
    const after = await until(
      second.seen,
      (s) => answered(2)(s) && storage.getItem(`lg:stream:${threadId}`) === null,
      "the rejoined run to end",
    );
    print({ after: shown(after) });
    second.unmount();
  } else if (mode === "interrupt") {
    const page = mount(options);
    page.seen.current.submit(input, {});
    const paused = await until(page.seen, (s) => !s.isLoading && s.interrupt != null, "the interrupt");
    print({ thread_id: threadId, interrupt: paused.interrupt.value, messages: shown(paused) });
    // as agent-chat-ui's Approve button sends it (use-interrupted-actions.tsx)
    page.seen.current.submit({}, { command: { resume: { decisions: [{ type: "approve" }] } } });
    const done = await until(
      page.seen,
      (s) => answered(4)(s) && s.interrupt == null,
      "the resumed run's tool result and answer",
    );
    print({ messages: shown(done) });
    page.unmount();
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
