// @ts-check
/**
 * The volumes page: the project's volumes with their size and use (every value put on the page as text).
 * Files are copied in and out with `runplane volumes cp`; the page says so.
 */
import { api, call } from "./api.js";
import { h, table } from "./dom.js";
import { when } from "./format.js";
import { requireSession } from "./session.js";

/**
 * Bytes as MiB or GiB, one decimal.
 *
 * @param {number} bytes
 */
function size(bytes) {
  const mib = bytes / 1024 / 1024;
  return mib >= 1024 ? `${(mib / 1024).toFixed(1)} GiB` : `${mib.toFixed(1)} MiB`;
}

/** The page's nodes. */
export async function volumesPage() {
  const session = requireSession();
  const heading = h("h1", {}, "Volumes");
  const about = h(
    "p",
    { class: "muted" },
    "Folders of files this project's replicas mount ([volumes] in runplane.toml), each with a hard size limit. ",
    "Copy files in and out with runplane volumes cp.",
  );
  const path = { project_id: session.project_id };
  const data = await call(api.GET("/v3/projects/{project_id}/volumes", { params: { path } }));
  const rows = data.volumes.map((v) =>
    h(
      "tr",
      { "data-volume": v.name },
      h("td", { class: "mono" }, v.name),
      h("td", {}, size(v.size_bytes)),
      h("td", {}, `${size(v.used_bytes)} (${Math.min(100, Math.round((v.used_bytes / v.size_bytes) * 100))}%)`),
      h("td", {}, when(v.created_at)),
    )
  );
  return [
    heading,
    about,
    data.volumes.length
      ? h("div", { class: "scroll" }, table(["Name", "Size", "Used", "Created"], rows, { bodyId: "volumes" }))
      : h(
        "p",
        { class: "muted", id: "no-volumes" },
        `No volumes yet: runplane volumes create ${session.project_id}:weights --size-gb 1`,
      ),
  ];
}
