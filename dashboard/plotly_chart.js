// One Plotly figure, drawn by plotly.js's basic bundle (scatter, bar and pie traces), which
// the page loads once from the app's static files, the first time a chart needs it.
// data: {figure: the figure's JSON text (data and layout), src: the bundle's URL, failed: what
// to say, in the page's language, if the bundle does not load}; without a
// figure, only the loading starts (a page mounts that first, before its charts are computed).

// A proxy may have put the bundle in the page itself (<script data-plotly-early>, from
// docs/hosting/nginx.conf), so that it runs before Streamlit draws the page: while that one is
// still loading, the charts wait for it rather than load the bundle a second time.
function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__plotlyLoading) {
    window.__plotlyLoading = new Promise((resolve, reject) => {
      const early = document.querySelector("script[data-plotly-early]:not([data-failed])");
      const script = early || document.createElement("script");
      const failed = () => {
        window.__plotlyLoading = undefined;
        script.dataset.failed = "1";
        if (!early) script.remove();
        reject(new Error(`Plotly's script did not load from ${script.src || src}`));
      };
      script.addEventListener("load", () => (window.Plotly ? resolve(window.Plotly) : failed()));
      script.addEventListener("error", failed);
      if (!early) {
        script.src = src;
        script.async = true;
        document.head.appendChild(script);
      }
    });
  }
  return window.__plotlyLoading;
}

// The page's text colour as [r, g, b], read through the theme's CSS variable.
function textRgb(element) {
  const probe = document.createElement("span");
  probe.style.color = "var(--st-text-color, #31333F)";
  element.appendChild(probe);
  const rgb = getComputedStyle(probe).color.match(/[\d.]+/g).slice(0, 3).join(", ");
  probe.remove();
  return rgb;
}

// The figure's layout in the page's theme, as Streamlit draws its own Plotly charts: the
// theme's font, axis texts in the text colour at 60 %, grid lines at 15 %, no background of
// its own, no side margins beyond the axis labels. What the figure sets itself wins.
function themed(layout, element) {
  const rgb = textRgb(element);
  const faded = `rgba(${rgb}, 0.6)`, grid = `rgba(${rgb}, 0.15)`;
  const family = getComputedStyle(element).getPropertyValue("--st-font").trim() || "sans-serif";
  const axis = (own, extra, standoff) => ({
    gridcolor: grid, zerolinecolor: grid, linecolor: grid, tickcolor: grid, automargin: true,
    ...extra, ...own,
    tickfont: { color: faded, size: 12, ...(own.tickfont || {}) },
    title: { standoff, ...(typeof own.title === "string" ? { text: own.title } : own.title || {}),
             font: { color: faded, size: 14, ...((own.title || {}).font || {}) } },
  });
  const out = {
    ...layout,
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { family, color: faded, size: 12, ...(layout.font || {}) },
    legend: { ...(layout.legend || {}), font: { color: `rgb(${rgb})`, size: 12, ...((layout.legend || {}).font || {}) } },
    hoverlabel: { font: { family, size: 12 }, ...(layout.hoverlabel || {}) },
    margin: { pad: 8, r: 0, l: 0, ...(layout.margin || {}) },
  };
  for (const key of new Set(["xaxis", "yaxis", ...Object.keys(layout).filter((k) => /^[xy]axis\d*$/.test(k))])) {
    out[key] = axis(layout[key] || {}, key.startsWith("x") ? { showgrid: false, zeroline: false } : {},
                    key.startsWith("x") ? 8 : 16);
  }
  return out;
}

export default function ({ parentElement, data }) {
  if (data.figure === undefined) {
    loadPlotly(data.src).catch(() => {});  // a chart that needs it says why it did not load
    return;
  }
  let plot = parentElement.querySelector(".plotly-figure");
  if (!plot) {
    plot = document.createElement("div");
    plot.className = "plotly-figure";
    parentElement.appendChild(plot);
  }
  const figure = JSON.parse(data.figure);
  const layout = figure.layout || {};
  plot.style.width = "100%";
  plot.style.height = `${layout.height || 450}px`;
  let current = true;
  loadPlotly(data.src)
    .then((Plotly) => {
      if (!current) return;
      Plotly.react(plot, figure.data || [], themed(layout, parentElement), { displaylogo: false, responsive: true });
      if (!plot.resizeWatch) {  // a column that changes width (the sidebar shown or hidden) redraws the chart
        plot.resizeWatch = new ResizeObserver(() => plot.isConnected && Plotly.Plots.resize(plot));
        plot.resizeWatch.observe(plot);
      }
    })
    .catch((error) => {
      console.error(error);
      plot.style.height = "auto";
      plot.textContent = data.failed || error.message;
    });
  return () => {
    current = false;
    // Called before each redraw with new data as well as on removal: free the chart only
    // once it has left the page.
    setTimeout(() => {
      if (!plot.isConnected && window.Plotly) {
        plot.resizeWatch?.disconnect();
        window.Plotly.purge(plot);
      }
    }, 0);
  };
}
