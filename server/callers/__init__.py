"""Who is calling and how much they may do: the deployment's one sign-in (`sign_in`: API keys
and stream tokens in `auth`, JWTs in `jwt_auth`, a project's `auth` in `project_auth`), and the
caller's per-minute budgets and open streams (`quotas`, named per route by `budgets`) and query
pool (`caller_queries`). What a caller may reach is `server.access`'s, one door per resource.
"""
