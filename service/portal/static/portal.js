// The portal's live part: on the task list, each change of the tenant's tasks
// arrives on the status stream (Server-Sent Events, same origin, the session's
// cookie) and updates its row; the page works without it.
(function () {
  var source = document.body.getAttribute("data-live");
  if (!source || !window.EventSource) return;
  var banner = document.getElementById("live");
  var count = document.getElementById("live-count");
  var seen = 0;
  function set(row, field, value, asState) {
    var cell = row.querySelector('[data-field="' + field + '"]');
    if (!cell || value === undefined || value === null) return;
    cell.textContent = String(value);
    if (asState) cell.className = "state " + String(value);
  }
  var stream = new EventSource(source);
  stream.addEventListener("open", function () {
    if (banner) banner.hidden = false;
  });
  stream.addEventListener("task", function (event) {
    var task;
    try { task = JSON.parse(event.data); } catch (e) { return; }
    seen += 1;
    if (count) count.textContent = String(seen);
    var rows = document.querySelectorAll("tr[data-task]");
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-task") !== task.id) continue;
      set(rows[i], "status", task.status, true);
      if (task.delivery) {
        set(rows[i], "delivery", task.delivery.status, true);
        set(rows[i], "attempts", task.delivery.attempts, false);
      }
      rows[i].classList.add("changed");
    }
  });
})();
