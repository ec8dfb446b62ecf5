// Live parts of the workspace list and workspace pages: poll the JSON API
// (the same one the CLI uses, with the session cookie) and follow build logs
// through its streaming logs endpoint. No framework; nothing leaves this origin.
"use strict";
(function () {
  const POLL_MS = 1500;
  const cls = (s) => ({ running: "ok", connected: "ok", ready: "ok", succeeded: "ok",
    failed: "bad", canceled: "bad", timeout: "bad", start_error: "bad", start_timeout: "bad", disconnected: "bad" })[s] || "busy";
  const setStatus = (el, s) => { if (el && el.textContent !== s) { el.textContent = s; el.className = "status " + cls(s); } };
  const el = (tag, text, attrs) => {
    const e = document.createElement(tag);
    if (text) e.textContent = text;
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  };
  async function api(path) {
    const res = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (res.status === 401) { location.href = "/login?redirect=" + encodeURIComponent(location.pathname) + "&message=" + encodeURIComponent("Your session ended; sign in again."); throw new Error("signed out"); }
    if (!res.ok) { const b = await res.json().catch(() => ({})); throw new Error(b.message || res.statusText); }
    return res.json();
  }
  function loop(fn) {
    // fn returns false to stop polling (a deleted workspace).
    const tick = async () => {
      let again = true;
      try { again = (await fn()) !== false; } catch (e) { /* the next poll retries */ }
      if (again) setTimeout(tick, POLL_MS);
    };
    setTimeout(tick, POLL_MS);
  }

  const list = document.querySelector("[data-live=workspaces]");
  if (list) {
    loop(async () => {
      const res = await api("/api/v2/workspaces");
      for (const w of res.workspaces || []) {
        const row = list.querySelector(`tr[data-workspace-id="${w.id}"]`);
        if (row) setStatus(row.querySelector("[data-field=status]"), w.latest_build.status);
      }
    });
  }

  const page = document.querySelector("[data-live=workspace]");
  if (!page) return;
  const base = page.dataset.base;
  const logEl = document.getElementById("build-log");
  let following = null;
  async function follow(buildID) {
    if (following === buildID) return;
    following = buildID;
    logEl.textContent = "";
    let after = 0;
    for (;;) {
      try {
        const res = await fetch(`/api/v2/workspacebuilds/${buildID}/logs?after=${after}&follow=true`, { credentials: "same-origin" });
        if (!res.ok || !res.body) return;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          buf += value;
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl); buf = buf.slice(nl + 1);
            if (!line.trim()) continue;
            const l = JSON.parse(line);
            after = Math.max(after, l.id);
            if (following !== buildID) return;
            const atEnd = logEl.scrollTop + logEl.clientHeight >= logEl.scrollHeight - 4;
            logEl.append((l.stage ? "[" + l.stage + "] " : "") + l.output + "\n");
            if (atEnd) logEl.scrollTop = logEl.scrollHeight;
          }
        }
      } catch (e) {
        if (following !== buildID) return;
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
    }
  }
  function renderAgents(w) {
    const box = page.querySelector("[data-field=agents]");
    const frag = document.createDocumentFragment();
    for (const r of w.latest_build.resources || []) {
      for (const a of r.agents || []) {
        const card = el("div", "", { class: "card agent" });
        card.append(el("h3", a.name));
        const p = el("p", "Status ");
        const st = el("span"); setStatus(st, a.status);
        const lc = el("span"); setStatus(lc, a.lifecycle_state);
        p.append(st, ", lifecycle ", lc);
        if (a.version) p.append(", version " + a.version);
        card.append(p);
        const links = (label, items) => {
          if (!items.length) return;
          const q = el("p", label + ": ");
          for (const [text, href] of items) q.append(el("a", text, { href, target: "_blank", rel: "noopener" }), " ");
          card.append(q);
        };
        links("Apps", (a.apps || []).map((x) => [x.display_name || x.slug, `${base}/apps/${encodeURIComponent(x.slug)}/`]));
        links("Listening ports", (a.listening_ports || []).map((x) => [String(x.port), `${base}/ports/${x.port}/`]));
        frag.append(card);
      }
    }
    if (!frag.childNodes.length) frag.append(el("p", "No agents (the workspace is not running)."));
    box.replaceChildren(frag);
  }
  follow(page.dataset.buildId);
  loop(async () => {
    let w;
    try {
      w = await api(`/api/v2/workspaces/${page.dataset.workspaceId}`);
    } catch (e) {
      setStatus(page.querySelector("[data-field=status]"), "gone: " + e.message);
      return false;
    }
    setStatus(page.querySelector("[data-field=status]"), w.latest_build.status);
    if (w.latest_build.status === "deleted") { renderAgents(w); return false; }
    page.querySelector("[data-field=build]").textContent = w.latest_build.build_number;
    renderAgents(w);
    if (w.latest_build.id !== following) follow(w.latest_build.id);
  });
})();
