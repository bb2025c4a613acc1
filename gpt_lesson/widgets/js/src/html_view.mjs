// The explorer's HTML view: this module script runs inside the <iframe srcdoc> that html_view.py writes,
// where no widget manager and no kernel exist (nbconvert's HTML, the slide decks, RISE). Python put
// three base64 strings before it: GL.code (the explorer's ES module, deflated: the same data the
// widget sends), GL.meta (deflated JSON: the traits, the label table, the style sheet, and where
// each binary value lies in GL.data) and GL.data (the binary values, the payload's arrays, deflated).
// A stand-in for the anywidget model keeps the traits in the page, so every control that needs
// no kernel works; the text box says there is no kernel. The frame's height follows the explorer.
const bytesOf = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));

function inflated(b64) {
  return new Response(new Blob([bytesOf(b64)]).stream().pipeThrough(new DecompressionStream("deflate")));
}

async function inflate(b64) {
  return inflated(b64).text();
}

// {"$buffer": n} -> a DataView of the n-th binary value, as a widget manager hands buffers over
function revive(x, data, spans) {
  if (Array.isArray(x)) return x.map((v) => revive(v, data, spans));
  if (x && typeof x === "object") {
    if (typeof x.$buffer === "number") {
      const [offset, length] = spans[x.$buffer];
      return new DataView(data.buffer, data.byteOffset + offset, length);
    }
    return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, revive(v, data, spans)]));
  }
  return x;
}

// What an explorer uses of the anywidget model, kept in the page: a change calls the listeners
// of "change:<name>" and "change"; save_changes and send have no kernel to talk to.
function standInModel(state) {
  const listeners = new Map();
  const emit = (name, ...args) => { for (const fn of [...(listeners.get(name) || [])]) fn(...args); };
  const model = {
    no_kernel: true,
    get: (name) => state[name],
    set(name, value) {
      if (Object.is(state[name], value)) return;
      state[name] = value;
      emit("change:" + name, model, value);
      emit("change", model);
    },
    on(names, fn) {
      for (const name of names.split(/\s+/)) {
        if (!listeners.has(name)) listeners.set(name, new Set());
        listeners.get(name).add(fn);
      }
    },
    off(names, fn) {
      for (const name of (names || "").split(/\s+/)) {
        if (!names) listeners.clear();
        else if (fn) (listeners.get(name) || new Set()).delete(fn);
        else listeners.delete(name);
      }
    },
    save_changes() {},
    send() {},
  };
  return model;
}

// The frame's own height follows the explorer; the explorer's pictures follow the page's height:
// the slide's height in a reveal.js deck (the decks, RISE), else the window's.
function host() {
  try { return window.frameElement; } catch (e) { return null; } // a foreign page: keep the default height
}

window.glViewHeight = () => {
  const frame = host();
  if (!frame) return 0;
  const slides = frame.closest(".reveal .slides");
  if (slides && slides.offsetHeight) return slides.offsetHeight;
  return frame.ownerDocument.defaultView.innerHeight;
};

async function main() {
  const el = document.getElementById("gl-view");
  try {
    const meta = JSON.parse(await inflate(GL.meta));
    const style = document.createElement("style");
    style.textContent = meta.css;
    document.head.append(style);
    const url = URL.createObjectURL(new Blob([await inflate(GL.code)], { type: "text/javascript" }));
    const mod = await import(url);
    URL.revokeObjectURL(url);
    const data = new Uint8Array(await inflated(GL.data).arrayBuffer());
    const model = standInModel(revive(meta.state, data, meta.buffers));
    const frame = host();
    if (frame) {
      const fit = () => {
        const height = Math.ceil(el.getBoundingClientRect().height) + "px";
        if (frame.style.height !== height) frame.style.height = height;
      };
      new ResizeObserver(fit).observe(el);
      const page = frame.ownerDocument.defaultView;
      const onPage = () => window.dispatchEvent(new Event("resize")); // the page's height changed
      page.addEventListener("resize", onPage);
      window.addEventListener("pagehide", () => page.removeEventListener("resize", onPage));
    }
    await mod.default.render({ model, el });
    document.documentElement.dataset.ready = "true";
  } catch (err) {
    const pre = document.createElement("pre");
    pre.textContent = String(err && err.stack ? err.stack : err);
    el.replaceChildren(pre);
    console.error(err);
  }
}

main();
