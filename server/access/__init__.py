"""What a caller may reach and submit: the one door to each resource (`threads`, `runs`,
`assistants`, `crons`, `store`) and the rules of a new run (`new_runs`, `run_context`). Who
the caller is, and their budgets, are `server.callers`'.

The one door to each resource: every path that reaches a thread, a run, an assistant or a
store item goes through its module here, which applies the rules in one fixed order
(docs/security.md, "One door per resource"):

1. the caller: one `Caller`, made once per request by the deployment's sign-in
   (`server/callers/sign_in.py`);
2. owner isolation: another owner's object is exactly an unknown id (404);
3. the project's `@auth.on` handler for the resource and action, with its filter: a refusal
   is its status (403), an object its filter leaves out is not found (404), a listing leaves
   it out;
4. the caller's budgets and caps (`server/callers/budgets.py`, `quotas.py`, the store's caps in
   `stream_store/store.py`).

The handlers of both dialects (`/v1` and LangGraph's) read the request, call one of these
operations and render the answer; no handler asks the project's auth itself.
"""
