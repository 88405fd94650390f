// The only script of the console: pages that ask for it reload themselves
// every few seconds, unless the operator is typing in a form.
(function () {
  var seconds = Number(document.body.getAttribute("data-refresh"));
  if (!seconds) return;
  setInterval(function () {
    var active = document.activeElement;
    if (active && (active.tagName === "INPUT" || active.tagName === "SELECT")) return;
    window.location.reload();
  }, seconds * 1000);
})();
