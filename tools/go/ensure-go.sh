#!/usr/bin/env bash
# Make sure the go command can build the root module (go.mod): Go 1.21 or newer, which reads go.mod's
# toolchain line and fetches the Go it names through the module proxy. Debian 12's golang-go is 1.19, too
# old for that; bookworm-backports has golang-1.23, installed here (with the backports source if missing)
# when no go command of 1.21+ is on PATH. Also protoc (Debian's protobuf-compiler), for the gRPC code.
set -euo pipefail
go_ok() {
  command -v go >/dev/null 2>&1 || return 1
  local minor
  minor=$(go env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  [ -n "$minor" ] && [ "$minor" -ge 21 ]
}
if ! go_ok; then
  if [ -x /usr/lib/go-1.23/bin/go ]; then
    :
  else
    echo "installing apt packages: golang-1.23 (bookworm-backports)"
    if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "deb http://deb.debian.org/debian bookworm-backports main" >/etc/apt/sources.list.d/backports.list
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports golang-1.23-go
  fi
  ln -sf /usr/lib/go-1.23/bin/go /usr/local/bin/go
  ln -sf /usr/lib/go-1.23/bin/gofmt /usr/local/bin/gofmt
fi
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing apt packages: protobuf-compiler"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends protobuf-compiler
fi
