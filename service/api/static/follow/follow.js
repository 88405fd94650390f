// Follows one task over GET /v1/ws: status, progress and the final result, live.
// The API key goes in the socket's first message, never into a URL; it is kept
// only in this page's memory.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const TERMINAL = new Set(["succeeded", "failed", "cancelled", "timed_out"]);
  const FATAL = new Set([4401, 4403, 4429]);
  let socket = null;
  let finished = false;
  let retries = 0;

  function say(text) { $("connection").textContent = text; }
  function problem(text) { $("problem").textContent = text; }

  function show(task) {
    $("panel").hidden = false;
    $("task-id").textContent = task.id;
    const status = $("status");
    status.textContent = task.status;
    status.className = "status-" + task.status;
    const progress = task.progress || null;
    const percent = progress ? progress.percent : (task.status === "succeeded" ? 100 : 0);
    $("bar").value = percent;
    $("percent").textContent = percent + " %";
    $("message").textContent = (progress && progress.message) || "";
    $("version").textContent = String(task.version);
    if (TERMINAL.has(task.status)) {
      finished = true;
      const outcome = task.status === "succeeded" ? task.result : (task.error ?? task.result);
      $("result").textContent = JSON.stringify(outcome, null, 2);
      $("result-row").hidden = false;
      say("finished: " + task.status);
      const done = socket;
      socket = null;
      if (done) done.close(1000, "task finished");
    }
  }

  function connect(key, taskId) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + "/v1/ws");
    socket = ws;
    say("connecting...");
    ws.onopen = () => ws.send(JSON.stringify({ type: "auth", token: key }));
    ws.onmessage = (event) => {
      if (socket !== ws) return;
      const m = JSON.parse(event.data);
      if (m.type === "ready") {
        retries = 0;
        say("connected");
        // On a reconnect too: the subscription answers with the task as it is now.
        ws.send(JSON.stringify({ type: "subscribe", taskIds: [taskId] }));
      } else if (m.type === "task") {
        if (m.task.id === taskId) show(m.task);
      } else if (m.type === "error") {
        problem(m.message);
      } else if (m.type === "ping") {
        ws.send(JSON.stringify({ type: "pong" }));
      }
    };
    ws.onclose = (event) => {
      if (socket !== ws) return; // replaced by a newer connection
      socket = null;
      if (finished) return;
      if (FATAL.has(event.code)) {
        say("closed");
        problem(event.reason || "the server refused the connection (" + event.code + ")");
        return;
      }
      retries += 1;
      const wait = Math.min(30, 2 ** retries) * 1000 * (0.5 + Math.random() / 2);
      say("connection lost; reconnecting in " + Math.round(wait / 1000) + " s");
      setTimeout(() => { if (!finished) connect(key, taskId); }, wait);
    };
  }

  $("follow").addEventListener("submit", (event) => {
    event.preventDefault();
    const old = socket;
    socket = null;
    if (old) old.close(1000, "following another task");
    finished = false;
    retries = 0;
    problem("");
    $("result-row").hidden = true;
    connect($("key").value.trim(), $("task").value.trim());
  });

  // A task id may come in the fragment (never sent to the server): /docs/follow#task_...
  if (location.hash.length > 1) $("task").value = decodeURIComponent(location.hash.slice(1));
})();
