// The region selector of the workspace page (site/regions.go): restores the
// visitor's choice from localStorage, measures the browser's latency to
// each region's /healthz and shows it beside the region's name, and keeps a
// new choice. live.js links apps through the selected region and renders
// them again when the choice changes (the select's "change" event).
"use strict";
(function () {
  const sel = document.querySelector("[data-region-select]");
  if (!sel) return;
  const KEY = "coder.region";
  let saved = null;
  try { saved = localStorage.getItem(KEY); } catch (e) { /* storage disabled: the primary */ }
  if (saved && [...sel.options].some((o) => o.value === saved)) sel.value = saved;
  sel.addEventListener("change", () => {
    try { localStorage.setItem(KEY, sel.value); } catch (e) { /* not kept */ }
  });
  // The latency is the best of a few round trips (the first pays for the
  // TCP and TLS handshakes). The answer is opaque (another origin, no-cors):
  // only its timing is used. A region that does not answer says so.
  async function probe(o) {
    const url = o.dataset.pathAppUrl + "/healthz";
    let best = Infinity;
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      try {
        await fetch(url, { mode: "no-cors", cache: "no-store", credentials: "omit" });
      } catch (e) {
        o.textContent = o.dataset.label + " (unreachable)";
        o.dataset.latencyMs = "";
        return;
      }
      best = Math.min(best, performance.now() - t0);
    }
    o.dataset.latencyMs = String(Math.round(best));
    o.textContent = `${o.dataset.label} (${Math.round(best)} ms)`;
  }
  for (const o of sel.options) probe(o);
})();
