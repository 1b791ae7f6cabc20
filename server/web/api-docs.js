// Starts Swagger UI on the API docs page (/schema, rendered by server/api_docs.py).
//
// A file, not an inline script, so that the docs page's Content-Security-Policy allows
// scripts from this origin only. The spec is loaded from the URL the page names.

const root = document.getElementById("swagger-ui");

window.ui = SwaggerUIBundle({
  url: root.dataset.specUrl,
  dom_id: "#swagger-ui",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null, // the default sends the spec to an online validator
  presets: [SwaggerUIBundle.presets.apis],
});
