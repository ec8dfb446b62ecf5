// The web terminal: xterm.js over the agent's reconnecting PTY WebSocket.
// Server to browser: binary messages of raw terminal output. Browser to
// server: text messages {"data": keystrokes, "height": rows, "width": cols}.
// The reconnect id lives in sessionStorage, so a dropped connection (or a
// reload of this tab) comes back to the same shell.
"use strict";
(function () {
  const box = document.getElementById("terminal");
  const statusEl = document.getElementById("term-status");
  const agentID = box.dataset.agentId;
  const key = "coder.pty." + agentID;
  let id = sessionStorage.getItem(key);
  if (!id) { id = crypto.randomUUID(); sessionStorage.setItem(key, id); }
  const term = new Terminal({ cursorBlink: true, fontFamily: "monospace", fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  term.focus();
  window.coderTerminal = term; // for tests and the browser console
  let ws = null;
  let delay = 250;
  const send = (msg) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg)); };
  function connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({ reconnect: id, width: term.cols, height: term.rows });
    ws = new WebSocket(`${proto}//${location.host}/api/v2/workspaceagents/${agentID}/pty?${q}`);
    ws.binaryType = "arraybuffer";
    // The agent replays what the session printed lately on every attach:
    // clear the screen before the first message so it is not shown twice.
    let fresh = true;
    ws.onopen = () => { statusEl.textContent = "connected"; delay = 250; send({ height: term.rows, width: term.cols }); };
    ws.onmessage = (ev) => {
      if (fresh) { term.reset(); fresh = false; }
      term.write(typeof ev.data === "string" ? ev.data : new Uint8Array(ev.data));
    };
    ws.onclose = (ev) => {
      // 1000: the shell exited. Anything else: the session lives on in the
      // agent (a blip, coderd restarting): come back to it.
      if (ev.code === 1000) {
        statusEl.textContent = "session ended; reload the page for a new shell";
        sessionStorage.removeItem(key);
        return;
      }
      statusEl.textContent = `disconnected${ev.reason ? " (" + ev.reason + ")" : ""}; reconnecting…`;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 5000);
    };
  }
  term.onData((data) => send({ data }));
  term.onResize(({ cols, rows }) => send({ height: rows, width: cols }));
  window.addEventListener("resize", () => fit.fit());
  connect();
})();
