// The runstream web page: the same HTTP API and SSE protocol as any client, no build step.
//
// The address (`/?thread=ID&run=ID`) names what the tab shows, so a reload or a second tab
// opens the same conversation and re-attaches to its run. Every message on screen is keyed by
// its message id: a complete message (from the thread or a `message` event) replaces whatever
// tokens were shown for it, and tokens for a message that is already complete are ignored, so
// replaying a run over saved messages never repeats text.
//
// Assistant messages are Markdown: marked turns them into HTML (raw HTML in a message is shown
// as text) and DOMPurify keeps only the tags a Markdown answer needs (both vendored in vendor/,
// loaded from this server), so nothing in a message runs or loads. While tokens stream in, a
// message is re-rendered at most once per animation frame. User and tool messages stay plain
// text.
//
// The graph a new conversation uses is `assistant`, the memory-aware assistant (docs/memory.md),
// when the server serves it (`runstream up` does by default), else `chat`. With it, the sidebar
// lists what is remembered about the signed-in user (the LangGraph store routes), and a tab
// open on a thread follows the thread (`GET /threads/{id}/stream`, lifecycle mode), so a run
// started or answered in another tab shows here too.

import { Marked } from "./vendor/marked/marked.esm.js";
import DOMPurify from "./vendor/dompurify/purify.es.mjs";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const ACTIVE = new Set(["queued", "running", "interrupted"]);
const EVENT_TYPES = ["run", "token", "message", "custom", "pending", "retry", "done", "error"];
const KEY_STORAGE = "runstream.apiKey";

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// ---- HTTP ----------------------------------------------------------------------------------

async function askForKey() {
  const dialog = $("key-dialog");
  $("key-input").value = localStorage.getItem(KEY_STORAGE) || "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  const key = $("key-input").value.trim();
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

async function api(method, path, body, headers = {}, retried = false) {
  const key = localStorage.getItem(KEY_STORAGE);
  const init = { method, headers: { ...headers } };
  if (key) init.headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401 && !retried) {
    await askForKey();
    return api(method, path, body, headers, true);
  }
  if (response.status === 204) return null;
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (payload && payload.error) || {};
    throw new ApiError(response.status, error.code || "http_error",
      error.message || `${method} ${path} answered ${response.status}`);
  }
  return payload;
}

function uuid4() {
  if (crypto.randomUUID) return crypto.randomUUID(); // secure contexts only
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// ---- Markdown -------------------------------------------------------------------------------

const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const markdown = new Marked({
  gfm: true,
  renderer: {
    // Raw HTML in an answer is shown as the text it is, never parsed as HTML.
    html({ text }) {
      return escapeHtml(text);
    },
    // An image in an answer becomes a link to it: the page loads nothing a message names.
    image({ href, text }) {
      return `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`;
    },
  },
});

const SANITIZE = {
  ALLOWED_TAGS: [
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "input", "li", "ol", "p", "pre", "s", "strong", "sub", "sup", "table", "tbody", "td",
    "th", "thead", "tr", "ul",
  ],
  ALLOWED_ATTR: ["align", "checked", "disabled", "href", "start", "title", "type"],
  ALLOW_DATA_ATTR: false,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
  if (node.tagName === "INPUT") {
    // Only a task list's checkbox (`- [x] done`), and never one the reader can tick.
    node.setAttribute("type", "checkbox");
    node.setAttribute("disabled", "");
  }
});

// marked escapes raw HTML (above) and DOMPurify removes whatever else could run or load
// (a `javascript:` link, an attribute marked let through): two layers, either one enough.
function renderMarkdown(el, text) {
  el.innerHTML = DOMPurify.sanitize(markdown.parse(text).trim(), SANITIZE);
}

// ---- what is on screen ---------------------------------------------------------------------

const view = {
  threadId: null,
  run: null, // the run this tab follows
  source: null, // its EventSource
  lastId: null, // id of the last event applied
  terminal: false,
  reopenDelay: 0,
  reopenTimer: null,
  messages: new Map(), // message id -> {el, final, text}
  dirty: new Set(), // streaming messages to render on the next animation frame
  frame: null, // the pending animation frame
  nextRender: 0, // no render before this time (performance.now()): 3x the last one's cost
  armedDelete: null, // thread id whose delete button was clicked once
  transientNotice: false, // the notice is about a failed refresh: the next success clears it
  memory: false, // the server serves the memory assistant: the memory panel is shown
  watch: null, // {threadId, abort}: the thread stream this tab reads for runs of other tabs
  sending: null, // the submit in flight (its promise), so the thread stream waits for it
};

function notice(text, { transient = false } = {}) {
  const el = $("notice");
  el.textContent = text || "";
  el.hidden = !text;
  view.transientNotice = Boolean(text) && transient;
}

function setConnection(state) {
  const el = $("connection");
  el.dataset.state = state;
  el.textContent = { live: "● live", reconnecting: "reconnecting…", idle: "" }[state];
}

function setAttempt(attempt) {
  const el = $("run-attempt");
  el.dataset.attempt = attempt ? String(attempt) : "";
  el.textContent = attempt ? `attempt ${attempt}` : "";
  el.title = attempt > 1 ? "The run was retried: an earlier attempt did not finish" : "";
}

function setStatus(status, attempt) {
  const el = $("run-status");
  el.dataset.status = status || "";
  el.textContent = status || "";
  if (attempt !== undefined) setAttempt(attempt);
  const active = ACTIVE.has(status);
  $("cancel").hidden = !active;
  $("send").disabled = active;
  $("send").title = active ? "Wait for the current run to finish, or cancel it" : "";
  if (status !== "interrupted") $("approval").hidden = true;
}

function writeLocation() {
  const params = new URLSearchParams();
  if (view.threadId) params.set("thread", view.threadId);
  if (view.run && !view.terminal) params.set("run", view.run.run_id);
  const query = params.toString();
  history.replaceState(null, "", query ? `/?${query}` : "/");
}

function contentText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((b) => (typeof b === "string" ? b : b && b.type === "text" ? b.text : "")).join("");
  }
  return "";
}

function describe(message) {
  const text = contentText(message.content);
  if (text || !message.tool_calls || !message.tool_calls.length) return text;
  return message.tool_calls.map((c) => `→ ${c.name}(${JSON.stringify(c.args)})`).join("\n");
}

function messageElement(id, role) {
  let entry = view.messages.get(id);
  if (!entry) {
    const el = document.createElement("div");
    el.className = "message";
    el.dataset.role = role;
    el.dataset.messageId = id;
    $("messages").querySelector(".empty")?.remove();
    $("messages").append(el);
    entry = { el, final: false, text: "" };
    view.messages.set(id, entry);
  }
  return entry;
}

function scrollDown() {
  const pane = $("messages");
  if (pane.scrollHeight - pane.scrollTop - pane.clientHeight < 120) pane.scrollTop = pane.scrollHeight;
}

function showMessage(message) {
  const entry = messageElement(message.id, message.role);
  entry.final = true;
  view.dirty.delete(entry);
  entry.el.classList.remove("streaming");
  const text = contentText(message.content);
  entry.text = describe(message);
  if (message.role === "assistant" && text) {
    entry.el.classList.add("markdown");
    renderMarkdown(entry.el, text);
  } else {
    entry.el.classList.remove("markdown");
    entry.el.textContent = entry.text;
  }
  scrollDown();
}

function renderDirty() {
  view.frame = null;
  const start = performance.now();
  if (start < view.nextRender) {
    // A long answer is slow to parse: leave the page time for everything else in between.
    view.frame = requestAnimationFrame(renderDirty);
    return;
  }
  for (const entry of view.dirty) renderMarkdown(entry.el, entry.text);
  view.dirty.clear();
  scrollDown();
  const end = performance.now();
  view.nextRender = end + 3 * (end - start);
}

function appendToken(messageId, text) {
  const existing = view.messages.get(messageId);
  if (existing && existing.final) return;
  const entry = existing || messageElement(messageId, "assistant");
  entry.el.classList.add("streaming", "markdown");
  entry.text += text;
  // Tokens come faster than frames: parse and draw the message once per frame at most.
  view.dirty.add(entry);
  view.frame ??= requestAnimationFrame(renderDirty);
}

function discardPartial(messageId) {
  const entry = view.messages.get(messageId);
  if (entry && !entry.final) {
    view.dirty.delete(entry);
    entry.el.remove();
    view.messages.delete(messageId);
  }
}

// ---- evaluations ----------------------------------------------------------------------------
//
// What a graph recorded of its own work (`record_evaluation`) is shown under the answer it
// grades (an evaluation's `message_id`, the run's final message): a small badge per evaluation,
// its kind and score, red when it did not pass. Fetched once a run is over, and for every run
// of a thread when it is opened; a failed fetch leaves the answers without badges.

function showEvaluations(evaluations) {
  const byMessage = new Map();
  for (const evaluation of evaluations) {
    if (!evaluation.message_id) continue;
    if (!byMessage.has(evaluation.message_id)) byMessage.set(evaluation.message_id, []);
    byMessage.get(evaluation.message_id).push(evaluation);
  }
  for (const [messageId, graded] of byMessage) {
    const entry = view.messages.get(messageId);
    if (!entry) continue; // summarised away, or not on screen
    entry.scores?.remove();
    entry.scores = element("div", { className: "scores" }, graded.map((e) => {
      const badge = element("span", {
        className: "score",
        textContent: `${e.kind} ${e.score.toFixed(2)}`,
        title: `${e.key}${e.detail ? `: ${JSON.stringify(e.detail)}` : ""}`,
      });
      badge.dataset.kind = e.kind;
      badge.dataset.passed = e.passed === null ? "" : String(e.passed);
      return badge;
    }));
    entry.scores.dataset.messageId = messageId;
    entry.el.after(entry.scores);
  }
}

async function loadEvaluations(path) {
  const threadId = view.threadId;
  try {
    const { evaluations } = await api("GET", path);
    if (view.threadId === threadId) showEvaluations(evaluations);
  } catch {
    // the answers stay without their badges
  }
}

// ---- the memory panel ----------------------------------------------------------------------
//
// What the memory assistant remembers about the signed-in user: its store items under
// ["memory", "facts"] (docs/memory.md), each with its value, how sure it is (the framing the
// prompt uses: stated, likely, uncertain) and a button that deletes it. Read again whenever a
// run ends or stops at a question, and when the tab gets focus.

const MEMORY_NAMESPACE = ["memory", "facts"];

function framing(confidence) {
  if (confidence >= 0.8) return "stated";
  if (confidence >= 0.5) return "likely";
  return "uncertain";
}

function factItem(item) {
  const fact = item.value || {};
  const confidence = typeof fact.confidence === "number" ? fact.confidence : 0;
  const label = framing(confidence);
  const badge = element("span", {
    className: "fact-confidence",
    textContent: label,
    title: `confidence ${confidence.toFixed(2)}${fact.written_at ? `, noted ${fact.written_at}` : ""}`,
  });
  badge.dataset.framing = label;
  const forget = element("button", {
    type: "button", className: "forget", textContent: "✕", title: "Forget this",
    onclick: () => forgetFact(item),
  });
  const li = element("li", { title: fact.text || "" }, [
    element("span", { className: "fact-kind", textContent: `${fact.kind || item.key}:` }),
    element("span", { className: "fact-value", textContent: String(fact.value ?? "") }),
    badge, forget,
  ]);
  li.dataset.key = item.key;
  return li;
}

async function loadMemory() {
  if (!view.memory) return;
  let page;
  try {
    page = await api("POST", "/store/items/search", { namespace_prefix: MEMORY_NAMESPACE, limit: 100 });
  } catch {
    return; // the panel keeps what it showed
  }
  const items = page.items.filter((item) => item.namespace.join("/") === MEMORY_NAMESPACE.join("/"))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  $("facts").replaceChildren(...items.map(factItem));
  $("facts-empty").hidden = items.length > 0;
}

async function forgetFact(item) {
  try {
    await api("DELETE", "/store/items", { namespace: item.namespace, key: item.key });
  } catch (error) {
    notice(`Could not forget ${item.key}: ${error.message}`);
    return;
  }
  loadMemory();
}

// The memory assistant is the page's graph when the server serves it, unless the user chose
// another graph while the page was asking.
async function chooseGraph() {
  let chosen = false;
  $("graph").addEventListener("change", () => (chosen = true), { once: true });
  let found;
  try {
    found = await api("POST", "/assistants/search", { graph_id: "assistant", limit: 1 });
  } catch {
    return; // `chat` stays the choice
  }
  if (!Array.isArray(found) || !found.length) return;
  const choice = $("graph").value;
  $("graph").prepend(new Option("assistant (remembers you)", "assistant"));
  $("graph").value = chosen ? choice : "assistant";
  view.memory = true;
  $("memory").hidden = false;
  loadMemory();
}

// ---- following the thread -------------------------------------------------------------------
//
// The run stream follows one run; the thread stream (lifecycle mode: a `metadata` event as each
// run of the thread starts and ends) says when another tab starts a run here. The tab then opens
// the thread again at that run: its messages, its tokens, its question. Read with fetch (an
// EventSource cannot send the API key), from the last event read when it reconnects.

async function readThreadStream(threadId, signal) {
  let lastId = null;
  let delay = 500;
  while (!signal.aborted) {
    try {
      const headers = { Accept: "text/event-stream" };
      const key = localStorage.getItem(KEY_STORAGE);
      if (key) headers.Authorization = `Bearer ${key}`;
      if (lastId) headers["Last-Event-ID"] = lastId;
      const response = await fetch(`/threads/${threadId}/stream?stream_mode=lifecycle`, { headers, signal });
      if (response.status === 404 || response.status === 401 || response.status === 403) return;
      if (!response.ok || !response.body) throw new Error(`thread stream ${response.status}`);
      delay = 500;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = { event: "message", data: [] };
          for (const line of block.split("\n")) {
            const colon = line.indexOf(":");
            if (colon <= 0) continue;
            const name = line.slice(0, colon);
            const text = line.slice(colon + 1).replace(/^ /, "");
            if (name === "data") fields.data.push(text);
            else fields[name] = text;
          }
          if (fields.id) lastId = fields.id;
          if (fields.event === "metadata" && fields.data.length) {
            threadRunSeen(threadId, JSON.parse(fields.data.join("\n")));
          }
        }
      }
    } catch {
      if (signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(10000, delay * 2);
  }
}

async function threadRunSeen(threadId, data) {
  if (!data || !data.run_id || data.status === "run_done") return;
  await view.sending; // a run this tab is submitting is followed by this tab already
  if (view.threadId !== threadId || (view.run && view.run.run_id === data.run_id)) return;
  openThread(threadId, data.run_id);
}

function watchThread(threadId) {
  if (view.watch && view.watch.threadId === threadId) return;
  if (view.watch) view.watch.abort.abort();
  view.watch = null;
  if (!threadId || !view.memory) return; // the thread stream is a LangGraph-dialect route
  const abort = new AbortController();
  view.watch = { threadId, abort };
  readThreadStream(threadId, abort.signal);
}

// ---- the approval card ----------------------------------------------------------------------
//
// An interrupt in LangChain's human-in-the-loop shape (`action_requests`, `review_configs`, as
// the built-in `approval` graph and agent-chat-ui use it) gets one review per proposed call,
// with the buttons its review config allows; once every call has a decision the run is resumed
// with `{"decisions": [...]}`, in the calls' order. Any other interrupt value is shown as JSON
// and answered with a JSON value typed in.

function isReviewRequest(value) {
  return Boolean(value) && Array.isArray(value.action_requests) && value.action_requests.length > 0
    && Array.isArray(value.review_configs) && value.review_configs.length > 0
    && value.action_requests.every((a) => a && typeof a.name === "string" && a.args && typeof a.args === "object")
    && value.review_configs.every((c) => c && typeof c.action_name === "string" && Array.isArray(c.allowed_decisions));
}

function element(tag, props = {}, children = []) {
  const el = Object.assign(document.createElement(tag), props);
  el.append(...children);
  return el;
}

function argText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function argValue(text, original) {
  if (typeof original === "string") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const DECIDED = { approve: "approved", edit: "edited", reject: "rejected" };

// The memory assistant's question (runner/assistant/confirmation.py): Yes applies the new
// value, No keeps the stored one.
const MEMORY_QUESTION = "update_memory";
const LABELS = { approve: "Approve", edit: "Edit", reject: "Reject" };
const MEMORY_LABELS = { approve: "Yes", reject: "No" };

function reviewCard(action, allowed, decide) {
  const question = action.name === MEMORY_QUESTION;
  const labels = question ? MEMORY_LABELS : LABELS;
  const card = element("div", { className: "review" });
  const buttons = element("div", { className: "review-buttons" });
  const editor = element("div", { className: "review-edit", hidden: true });
  const rejecter = element("div", { className: "review-reject", hidden: true });
  const decided = element("p", { className: "review-decided", hidden: true });
  const settle = (decision) => {
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    editor.hidden = rejecter.hidden = true;
    decided.hidden = false;
    decided.textContent = `→ ${question ? labels[decision.type].toLowerCase() : DECIDED[decision.type]}`;
    decide(decision);
  };
  const button = (decision, label, secondary, onClick) => {
    if (!allowed.includes(decision)) return;
    buttons.append(element("button", {
      type: "button", textContent: label, className: secondary ? "secondary" : "",
      onclick: onClick,
    }));
    buttons.lastChild.dataset.decision = decision;
  };
  const fields = Object.entries(action.args).map(([name, value]) => {
    const input = element("textarea", { rows: 2, value: argText(value) });
    input.dataset.arg = name;
    editor.append(element("label", { textContent: name }, [input]));
    return [name, input, value];
  });
  editor.append(element("button", {
    type: "button", textContent: "Run edited", className: "send-edit",
    onclick: () => settle({
      type: "edit",
      edited_action: {
        name: action.name,
        args: Object.fromEntries(fields.map(([name, input, value]) => [name, argValue(input.value, value)])),
      },
    }),
  }));
  const reason = element("textarea", { rows: 2, className: "reject-message", placeholder: "Why not (the model reads this)" });
  rejecter.append(
    element("label", { textContent: "Reason" }, [reason]),
    element("button", {
      type: "button", textContent: "Send rejection", className: "send-reject",
      onclick: () => settle(reason.value.trim() ? { type: "reject", message: reason.value.trim() } : { type: "reject" }),
    }),
  );
  button("approve", labels.approve, false, () => settle({ type: "approve" }));
  if (question) {
    button("reject", labels.reject, true, () => settle({ type: "reject" }));
    card.append(
      element("p", { className: "review-description", textContent: action.description || "Update what I remember?" }),
      buttons, decided,
    );
    card.dataset.question = "memory";
    return card;
  }
  button("edit", "Edit", true, () => {
    editor.hidden = !editor.hidden;
    rejecter.hidden = true;
  });
  button("reject", "Reject", true, () => {
    rejecter.hidden = !rejecter.hidden;
    editor.hidden = true;
  });
  card.append(
    element("p", { className: "review-description", textContent: action.description || `Run ${action.name}?` }),
    element("pre", { className: "review-call", textContent: `${action.name}(${JSON.stringify(action.args, null, 2)})` }),
    buttons, editor, rejecter, decided,
  );
  return card;
}

function showApproval(interrupt) {
  const reviews = $("approval-reviews");
  reviews.replaceChildren();
  const review = isReviewRequest(interrupt);
  $("approval-other").hidden = review;
  if (review) {
    const actions = interrupt.action_requests;
    const questions = actions.every((a) => a.name === MEMORY_QUESTION);
    $("approval-title").textContent = questions ? "A question." : "Approval needed.";
    const decisions = new Array(actions.length);
    let left = actions.length;
    $("approval-question").textContent = actions.length > 1
      ? `${actions.length} calls to review; the run goes on once each has a decision.` : "";
    actions.forEach((action, index) => {
      const config = interrupt.review_configs.find((c) => c.action_name === action.name);
      reviews.append(reviewCard(action, config ? config.allowed_decisions : [], (decision) => {
        decisions[index] = decision;
        left -= 1;
        if (left === 0) {
          $("approval").hidden = true;
          runAction("resume", { resume: { decisions } });
        }
      }));
    });
  } else {
    $("approval-title").textContent = "Approval needed.";
    $("approval-question").textContent = "The run is waiting for an answer.";
    $("approval-detail").textContent = JSON.stringify(interrupt, null, 2);
    $("resume-value").value = "null";
  }
  $("approval").hidden = false;
}

function resumeWithTypedValue() {
  let value;
  try {
    value = JSON.parse($("resume-value").value);
  } catch (error) {
    notice(`The answer is not JSON: ${error.message}`);
    return;
  }
  $("approval").hidden = true;
  runAction("resume", { resume: value });
}

function clearConversation() {
  stopFollowing();
  view.messages.clear();
  view.dirty.clear();
  $("messages").replaceChildren();
  setStatus("", null);
  notice("");
}

// ---- following a run -----------------------------------------------------------------------

function compareIds(a, b) {
  const [am, as] = a.split("-").map(Number);
  const [bm, bs] = b.split("-").map(Number);
  return am - bm || as - bs;
}

function stopFollowing() {
  clearTimeout(view.reopenTimer);
  if (view.source) view.source.close();
  view.source = null;
  view.run = null;
  setConnection("idle");
}

function follow(run) {
  stopFollowing();
  view.run = run;
  view.lastId = null;
  view.terminal = false;
  view.reopenDelay = 0;
  setStatus(run.status, run.attempt);
  writeLocation();
  openSource(run.stream_url);
}

function openSource(url) {
  const source = new EventSource(url);
  view.source = source;
  source.onopen = () => {
    view.reopenDelay = 0;
    setConnection("live");
  };
  source.onerror = () => {
    if (view.terminal || view.source !== source) return;
    setConnection("reconnecting");
    // CONNECTING: the browser retries by itself, sending Last-Event-ID. CLOSED: it gave up
    // (the server answered an error, e.g. an expired token), so start again with a fresh URL.
    if (source.readyState === EventSource.CLOSED) scheduleReopen();
  };
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (event) => {
      // A connection failure is also an `error` event, but a plain Event with no data: only
      // MessageEvents are the run's own events (`onerror` above handles the connection).
      if (view.source === source && event instanceof MessageEvent) apply(type, event);
    });
  }
}

function scheduleReopen() {
  const run = view.run;
  view.reopenDelay = Math.min(10000, view.reopenDelay ? view.reopenDelay * 2 : 500);
  view.reopenTimer = setTimeout(async () => {
    if (view.run !== run) return;
    try {
      const fresh = await api("GET", `/v1/runs/${run.run_id}`);
      if (view.run !== run) return;
      const after = view.lastId ? `&last_event_id=${encodeURIComponent(view.lastId)}` : "";
      openSource(fresh.stream_url + after);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        notice("This run no longer exists.");
        stopFollowing();
        return;
      }
      scheduleReopen(); // the server is still away
    }
  }, view.reopenDelay);
}

function finish(status) {
  if (view.run && status === "succeeded") loadEvaluations(`/v1/runs/${view.run.run_id}/evaluations`);
  view.terminal = true;
  if (view.source) view.source.close();
  view.source = null;
  setConnection("idle");
  setStatus(status);
  if (view.frame !== null) {
    cancelAnimationFrame(view.frame);
    view.nextRender = 0;
    renderDirty(); // a cancelled run keeps the tokens it streamed, drawn in full
  }
  for (const entry of view.messages.values()) entry.el.classList.remove("streaming");
  writeLocation();
  loadThreads();
  loadMemory();
}

function apply(type, event) {
  // EventSource resends nothing after a reconnect with Last-Event-ID; this guard only matters
  // when a stream is reopened by hand.
  if (view.lastId && event.lastEventId && compareIds(event.lastEventId, view.lastId) <= 0) return;
  if (event.lastEventId) view.lastId = event.lastEventId;
  setConnection("live");
  const data = JSON.parse(event.data);
  switch (type) {
    case "run":
      setStatus(data.status, data.attempt);
      break;
    case "token":
      appendToken(data.message_id, data.text);
      break;
    case "message":
      showMessage(data.message);
      break;
    case "pending":
      setStatus("interrupted");
      showApproval(data.interrupt);
      loadMemory(); // facts that contradicted nothing are written before the question
      break;
    case "retry":
      for (const id of data.discard) discardPartial(id);
      if (data.attempt) setAttempt(data.attempt);
      break;
    case "done":
      if (data.output) showMessage(data.output);
      finish(data.status);
      break;
    case "error": {
      const el = messageElement(`error-${view.run.run_id}`, "assistant").el;
      el.classList.add("failed");
      el.textContent = `The run failed (${data.code}): ${data.message}`;
      finish("failed");
      break;
    }
    default:
      break; // `custom` events are the graph's own; this page has no use for them
  }
}

// ---- threads -------------------------------------------------------------------------------

async function loadThreads() {
  let page;
  try {
    page = await api("GET", "/v1/threads?limit=100");
  } catch (error) {
    notice(`Could not load conversations: ${error.message}`, { transient: true });
    return;
  }
  if (view.transientNotice) notice("");
  const list = $("threads");
  list.replaceChildren(...page.threads.map((thread) => {
    const li = document.createElement("li");
    li.dataset.threadId = thread.thread_id;
    li.setAttribute("aria-current", String(thread.thread_id === view.threadId));
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = thread.title || "(empty)";
    title.title = title.textContent;
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.textContent = thread.status === "idle" ? "" : thread.status;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "delete";
    remove.title = "Delete this conversation for good";
    const armed = view.armedDelete === thread.thread_id;
    remove.dataset.armed = String(armed);
    remove.textContent = armed ? "delete?" : "✕";
    if (armed) remove.style.visibility = "visible";
    remove.addEventListener("click", (event) => {
      event.stopPropagation();
      deleteThread(thread.thread_id, remove);
    });
    li.append(title, badge, remove);
    li.addEventListener("click", () => openThread(thread.thread_id));
    return li;
  }));
}

async function deleteThread(threadId, button) {
  if (view.armedDelete !== threadId) {
    view.armedDelete = threadId; // a second click within 3 s confirms
    button.dataset.armed = "true";
    button.textContent = "delete?";
    button.style.visibility = "visible";
    setTimeout(() => {
      if (view.armedDelete !== threadId) return;
      view.armedDelete = null;
      const current = document.querySelector(`#threads li[data-thread-id="${threadId}"] .delete`);
      if (current) {
        current.dataset.armed = "false";
        current.textContent = "✕";
        current.style.visibility = "";
      }
    }, 3000);
    return;
  }
  view.armedDelete = null;
  try {
    await api("DELETE", `/v1/threads/${threadId}`);
  } catch (error) {
    notice(error.status === 409 ? "That conversation has a run in progress: cancel it first."
      : `Could not delete: ${error.message}`);
    return;
  }
  if (view.threadId === threadId) newChat();
  loadThreads();
}

function newChat() {
  clearConversation();
  view.threadId = null;
  watchThread(null);
  $("thread-title").textContent = "New chat";
  writeLocation();
  loadThreads();
  $("input").focus();
}

async function openThread(threadId, runId = null) {
  clearConversation();
  view.threadId = threadId;
  writeLocation();
  let thread;
  let runs;
  try {
    [thread, { runs }] = await Promise.all([
      api("GET", `/v1/threads/${threadId}`),
      api("GET", `/v1/threads/${threadId}/runs`),
    ]);
  } catch (error) {
    notice(error.status === 404 ? "That conversation does not exist (or is not yours)."
      : `Could not open the conversation: ${error.message}`);
    view.threadId = null;
    writeLocation();
    return;
  }
  if (view.threadId !== threadId) return; // another thread was picked meanwhile
  watchThread(threadId);
  $("thread-title").textContent = thread.title || "New chat";
  for (const message of thread.messages) showMessage(message);
  loadEvaluations(`/v1/threads/${threadId}/evaluations`);
  for (const li of $("threads").children) {
    li.setAttribute("aria-current", String(li.dataset.threadId === threadId));
  }
  const active = runs.find((r) => r.run_id === runId) || runs.findLast((r) => ACTIVE.has(r.status));
  const last = runs[runs.length - 1];
  if (active) follow(active);
  else if (last) setStatus(last.status, last.attempt);
}

// ---- actions -------------------------------------------------------------------------------

async function send(event) {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text) return;
  const id = uuid4();
  const body = {
    input: { messages: [{ role: "user", content: text, id }] },
    graph: $("graph").value,
  };
  const path = view.threadId ? `/v1/threads/${view.threadId}/runs` : "/v1/runs";
  $("send").disabled = true;
  let run;
  let sent;
  view.sending = new Promise((resolve) => { sent = resolve; });
  try {
    run = await api("POST", path, body, { "Idempotency-Key": id });
  } catch (error) {
    $("send").disabled = false;
    notice(error.status === 409 ? "This conversation already has a run in progress."
      : `Could not send: ${error.message}`);
    sent();
    return;
  }
  notice("");
  $("input").value = "";
  if (!view.threadId) {
    view.threadId = run.thread_id;
    $("thread-title").textContent = text.slice(0, 80);
  }
  showMessage({ id, role: "user", content: text });
  follow(run);
  sent();
  watchThread(view.threadId);
  loadThreads();
}

async function runAction(path, body) {
  if (!view.run) return;
  try {
    await api("POST", `/v1/runs/${view.run.run_id}/${path}`, body);
  } catch (error) {
    notice(`Could not ${path}: ${error.message}`);
  }
}

function start() {
  $("composer").addEventListener("submit", send);
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("new-thread").addEventListener("click", newChat);
  $("cancel").addEventListener("click", () => runAction("cancel"));
  $("resume").addEventListener("click", resumeWithTypedValue);
  $("set-key").addEventListener("click", async () => {
    await askForKey();
    loadThreads();
  });
  window.addEventListener("focus", () => {
    loadThreads();
    loadMemory();
  });

  const params = new URLSearchParams(location.search);
  // The graph is chosen once the key is known (the thread list asks for it when needed).
  loadThreads().then(chooseGraph).then(() => {
    if (view.threadId) watchThread(view.threadId);
  });
  if (params.get("thread")) openThread(params.get("thread"), params.get("run"));
  else $("input").focus();
}

start();
