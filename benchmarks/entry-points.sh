# Sourced by a visit script: the networks' entry points (autogemm tune --shapes nn, --layers) without
# pip, which cannot build offline on the device: the checkout's metadata where the carried site
# packages are found (/tmp/site, .device/env.sh's).
meta=/tmp/site/autogemm-0.0.0.dist-info
mkdir -p "$meta" && printf 'Metadata-Version: 2.1\nName: autogemm\nVersion: 0.0.0\n' > "$meta/METADATA"
python3 - "$meta/entry_points.txt" <<'PY'
import sys, tomllib
groups = tomllib.load(open("pyproject.toml", "rb"))["project"]["entry-points"]
open(sys.argv[1], "w").write("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items()))
PY
