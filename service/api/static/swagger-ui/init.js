// Renders hookrelay's own /openapi.json; loaded from a file so the page needs no inline script.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
});
