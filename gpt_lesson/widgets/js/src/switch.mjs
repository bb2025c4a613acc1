// The model switch above a set of attention explorers (attention_explorer.py: ModelSwitch): one button
// per model. Every model's explorer is built once and stays in the page, in the switch's box beside these
// buttons (classes gl-model-pane and gl-model-pane-<k>); a switch marks the chosen one data-shown="true"
// and the others "false", which the style sheet hides. Nothing is drawn again, nothing waits for the
// kernel, and it works without one. The buttons keep their keys, as every explorer control does.
import { buttonGroup, h, painted } from "./core.mjs";

// Mark the panes of this switch; the explorers' views can reach the page after these buttons, so keep
// looking (one try a frame, for a few seconds) until every pane is there.
function place(el, model, n) {
  let tries = 0, frame = 0;
  const step = () => {
    frame = 0;
    const box = el.closest(".gpt-lesson-model-switch"), index = model.get("index");
    const panes = box ? [...box.querySelectorAll(".gl-model-pane")].filter((p) => p.closest(".gpt-lesson-model-switch") === box) : [];
    for (const pane of panes) pane.dataset.shown = String(pane.classList.contains(`gl-model-pane-${index}`));
    if (box) box.dataset.shown = String(index);
    if (panes.length < n && tries++ < 600 && typeof requestAnimationFrame !== "undefined") frame = requestAnimationFrame(step);
  };
  step();
  return () => { if (frame) cancelAnimationFrame(frame); };
}

export default {
  render({ model, el }) {
    const names = model.get("names") || [];
    const tips = model.get("tips") || [];
    const group = buttonGroup("model", names.map((name, i) => [i, name, tips[i] || name]), (i) => {
      model.set("index", i);
      model.save_changes();
    });
    const root = h("div", { class: "gl-explorer gl-switch", "data-explorer": "switch" },
      [h("div", { class: "gl-row gl-controls" }, [h("span", { class: "gl-label", text: model.get("label") || "" }), group.el])]);
    el.append(root);
    let stop = () => {};
    const show = () => {
      group.set(model.get("index"));
      stop();
      stop = place(el, model, names.length);
      painted(root);
    };
    model.on("change:index", show);
    show();
    return () => { stop(); model.off("change:index", show); };
  },
};
