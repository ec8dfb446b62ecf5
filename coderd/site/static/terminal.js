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
    window.coderTerminalSocket = ws; // for tests
    // The agent replays what the session printed lately on every attach:
    // clear the screen before the first message so it is not shown twice.
    let fresh = true;
    ws.onopen = () => { statusEl.textContent = "connected"; delay = 250; send({ height: term.rows, width: term.cols }); };
    ws.onmessage = (ev) => {
      if (fresh) { term.reset(); fresh = false; }
      term.write(typeof ev.data === "string" ? ev.data : new Uint8Array(ev.data));
    };
    ws.onclose = async (ev) => {
      // 1000: the shell exited. Anything else: the session lives on in the
      // agent (a blip, coderd restarting): come back to it, unless coderd
      // refuses this visitor for good (the browser hides a refused
      // upgrade's status, so ask the API).
      if (ev.code === 1000) {
        statusEl.textContent = "session ended; reload the page for a new shell";
        sessionStorage.removeItem(key);
        return;
      }
      const refusal = await refused();
      if (refusal) {
        statusEl.textContent = refusal.text;
        if (refusal.link) {
          const a = document.createElement("a");
          a.href = refusal.link;
          a.textContent = " Sign in again";
          statusEl.append(a);
        }
        return;
      }
      statusEl.textContent = `disconnected${ev.reason ? " (" + ev.reason + ")" : ""}; reconnecting…`;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 5000);
    };
  }
  // refused says why coderd will not let this visitor back to the agent
  // (the session ended, the agent or workspace is gone or not theirs), or
  // null when trying again may work.
  async function refused() {
    let resp;
    try {
      resp = await fetch(`/api/v2/workspaceagents/${agentID}`, { credentials: "same-origin" });
    } catch (e) {
      return null; // coderd unreachable: a blip
    }
    if (resp.status === 401) {
      const back = encodeURIComponent(location.pathname + location.search);
      return { text: "Your session ended; the terminal stopped reconnecting.", link: `/login?redirect=${back}` };
    }
    if (resp.status === 403 || resp.status === 404) {
      let msg = "";
      try { msg = (await resp.json()).message || ""; } catch (e) { /* not JSON */ }
      return { text: `This workspace's agent is gone or not yours to reach (${resp.status}${msg ? ": " + msg : ""}); the terminal stopped reconnecting.` };
    }
    return null;
  }

  // Copy and paste as in a desktop terminal: Ctrl+Shift+C copies the
  // selection, Ctrl+Shift+V pastes; Ctrl+C and Ctrl+V go to the shell. The
  // browser's own paste (its menu, Shift+Insert) reaches xterm's input as
  // usual.
  const clipEl = document.getElementById("term-clipboard");
  const say = (text) => { clipEl.textContent = text; };
  term.attachCustomKeyEventHandler((ev) => {
    if (ev.type !== "keydown" || !ev.ctrlKey || !ev.shiftKey || ev.altKey || ev.metaKey) return true;
    if (ev.code === "KeyC") {
      ev.preventDefault();
      const text = term.getSelection();
      if (!text) { say("Select text to copy first."); return false; }
      navigator.clipboard.writeText(text).then(
        () => say(`Copied ${text.length} characters.`),
        () => say("The browser refused the clipboard: copy with its menu instead."));
      return false;
    }
    if (ev.code === "KeyV") {
      ev.preventDefault();
      navigator.clipboard.readText().then(
        (text) => { term.paste(text); say(""); },
        () => say("The browser refused the clipboard: paste with its menu or Shift+Insert instead."));
      return false;
    }
    return true;
  });
  term.onData((data) => send({ data }));
  term.onResize(({ cols, rows }) => send({ height: rows, width: cols }));
  window.addEventListener("resize", () => fit.fit());
  connect();
})();
