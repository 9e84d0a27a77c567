#!/usr/bin/env bash
# Build a tiny program around Kubernetes' own resource.ParseQuantity, for the differential test
# in tests/unit/test_quantity.py (GPU_WEBHOOK_QUANTITY_ORACLE=OUT/oracle).
#
# Usage: scripts/quantity-oracle.sh K8S_TREE OUT_DIR [GO]
#   K8S_TREE  a Kubernetes source tree with vendor/ (e.g. ~/.cache/kapi/src/k8s-v1.36.2, what
#             ../shared/tools/kapi/build.sh exports); nothing is downloaded.
#   OUT_DIR   where the program is copied and built (the tree is not written to).
#   GO        the go binary (default: go on PATH).
# The program copies pkg/api/resource's non-test files and gopkg.in/inf.v0 unchanged, except
# that quantity.go's CBOR import is pointed at a stub (CBOR is never used here).
# Input: one JSON object a line, {"mode": "parse"|"json", "text": "..."}: ParseQuantity(text),
# or json.Unmarshal of text as raw JSON into a Quantity. Output: one JSON line each,
# {"ok": bool, "err": "...", "string": q.String(), "dec": the exact decimal when short}.
set -euo pipefail
TREE=${1:?usage: quantity-oracle.sh K8S_TREE OUT_DIR [GO]}
OUT=${2:?usage: quantity-oracle.sh K8S_TREE OUT_DIR [GO]}
GO=${3:-go}
RES=$TREE/staging/src/k8s.io/apimachinery/pkg/api/resource
INF=$TREE/vendor/gopkg.in/inf.v0
[ -f "$RES/quantity.go" ] || { echo "quantity-oracle: no $RES/quantity.go" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT/resource" "$OUT/cbor" "$OUT/inf"
cp "$RES/amount.go" "$RES/math.go" "$RES/quantity.go" "$RES/scale_int.go" "$RES/suffix.go" "$OUT/resource/"
sed -i 's#k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct#oracle/cbor#' "$OUT/resource/quantity.go"
cp "$INF"/*.go "$OUT/inf/"
printf 'module gopkg.in/inf.v0\n' > "$OUT/inf/go.mod"
printf 'module oracle\n\ngo 1.22\n\nrequire gopkg.in/inf.v0 v0.9.1\n\nreplace gopkg.in/inf.v0 => ./inf\n' > "$OUT/go.mod"
cat > "$OUT/cbor/cbor.go" <<'EOF'
// Package cbor stands in for apimachinery's CBOR codec, which the oracle never uses.
package cbor

import "errors"

func Marshal(v interface{}) ([]byte, error) { return nil, errors.New("no cbor") }
func Unmarshal(b []byte, v interface{}) error { return errors.New("no cbor") }
EOF
cat > "$OUT/main.go" <<'EOF'
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"oracle/resource"
)

type in struct {
	Mode string `json:"mode"`
	Text string `json:"text"`
}

type out struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err,omitempty"`
	String string `json:"string,omitempty"`
	Dec    string `json:"dec,omitempty"`
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		var c in
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var q resource.Quantity
		var err error
		if c.Mode == "json" {
			err = json.Unmarshal([]byte(c.Text), &q)
		} else {
			q, err = resource.ParseQuantity(c.Text)
		}
		if err != nil {
			enc.Encode(out{Err: err.Error()})
			continue
		}
		o := out{OK: true, String: q.String()}
		if d := q.AsDec(); d.Scale() > -5000 && d.Scale() < 5000 {
			o.Dec = d.String()
		}
		enc.Encode(o)
	}
}
EOF
cd "$OUT"
GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 GOPATH="$OUT/.gopath" GOCACHE="$OUT/.gocache" \
  "$GO" build -o oracle .
echo "built $OUT/oracle: GPU_WEBHOOK_QUANTITY_ORACLE=$OUT/oracle"
