#!/usr/bin/env bash
# Refreshes bench/assets/data_docs/: the CSS, JS and fonts Great Expectations' Data Docs pages
# load from CDNs, at the versions its templates name, so that every run's Data Docs render offline.
# Run by a maintainer when GX's templates change (not at install time: the files are committed).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/assets/data_docs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && echo '{}' >package.json && npm install --no-audit --no-fund --ignore-scripts \
  bootstrap@4.3.1 jquery@3.7.1 popper.js@1.16.1 bootstrap-table@1.19.1 bootstrap-datepicker@1.9.0 \
  @fortawesome/fontawesome-free@6.6.0 vega@5.33.1 vega-lite@5.23.0 vega-embed@6.29.0 \
  @forevolve/bootstrap-dark@1.1.0 >/dev/null)
m="$work/node_modules"
rm -rf "$out" && mkdir -p "$out"
copy() { mkdir -p "$out/$(dirname "$2")" && cp "$m/$1" "$out/$2"; }
copy bootstrap/dist/css/bootstrap.min.css bootstrap/bootstrap.min.css
copy bootstrap/dist/js/bootstrap.min.js bootstrap/bootstrap.min.js
copy bootstrap/LICENSE bootstrap/LICENSE
copy jquery/dist/jquery.min.js jquery/jquery.min.js
copy jquery/LICENSE.txt jquery/LICENSE.txt
copy popper.js/dist/umd/popper.min.js popper/popper.min.js
copy bootstrap-table/dist/bootstrap-table.min.js bootstrap-table/bootstrap-table.min.js
copy bootstrap-table/dist/bootstrap-table.min.css bootstrap-table/bootstrap-table.min.css
copy bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.css \
  bootstrap-table/bootstrap-table-filter-control.min.css
copy bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.js \
  bootstrap-table/bootstrap-table-filter-control.min.js
copy bootstrap-table/LICENSE bootstrap-table/LICENSE
copy bootstrap-datepicker/dist/css/bootstrap-datepicker.min.css bootstrap-datepicker/bootstrap-datepicker.min.css
copy bootstrap-datepicker/dist/js/bootstrap-datepicker.min.js bootstrap-datepicker/bootstrap-datepicker.min.js
copy bootstrap-datepicker/LICENSE bootstrap-datepicker/LICENSE
copy @fortawesome/fontawesome-free/css/all.min.css fontawesome/css/all.min.css
copy @fortawesome/fontawesome-free/LICENSE.txt fontawesome/LICENSE.txt
cp -r "$m/@fortawesome/fontawesome-free/webfonts" "$out/fontawesome/webfonts"
copy vega/build/vega.min.js vega/vega.min.js
copy vega-lite/build/vega-lite.min.js vega/vega-lite.min.js
copy vega-embed/build/vega-embed.min.js vega/vega-embed.min.js
copy @forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css bootstrap-dark/bootstrap-prefers-dark.css
copy @forevolve/bootstrap-dark/LICENSE bootstrap-dark/LICENSE
# Each package's name, version and licence, from its own package.json (some ship no LICENSE file).
node -e '
const fs = require("fs"), path = require("path"), m = process.argv[1];
const names = ["bootstrap", "jquery", "popper.js", "bootstrap-table", "bootstrap-datepicker",
  "@fortawesome/fontawesome-free", "vega", "vega-lite", "vega-embed", "@forevolve/bootstrap-dark"];
const lines = ["# Bundled for offline Data Docs (scripts/vendor-data-docs-assets.sh)", "",
  "| package | version | licence |", "| --- | --- | --- |"];
for (const n of names) {
  const p = JSON.parse(fs.readFileSync(path.join(m, n, "package.json")));
  lines.push(`| ${n} | ${p.version} | ${typeof p.license === "string" ? p.license : JSON.stringify(p.license)} |`);
}
fs.writeFileSync(process.argv[2], lines.join("\n") + "\n");
' "$m" "$out/LICENSES.md"
du -sh "$out"
