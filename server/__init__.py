"""The runstream HTTP server (Litestar) and the `runstream` command line."""
