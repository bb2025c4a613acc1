// The model switch above a set of attention explorers (attention_explorer.py: ModelSwitch): one button
// per model; the index it sets is linked in the page (jslink) to the Stack that shows that model's
// explorer, so it works without a kernel too. The buttons keep their keys, as every explorer control does.
import { buttonGroup, h, painted } from "./core.mjs";

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
    const show = () => { group.set(model.get("index")); painted(root); };
    model.on("change:index", show);
    show();
    return () => model.off("change:index", show);
  },
};
