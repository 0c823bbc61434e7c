#!/usr/bin/env bash
# Builds sluice's container image offline (make image): the command is
# built here, static and reproducible, then podman builds
# deploy/image/Containerfile FROM scratch around it with this machine's
# CA certificates. The same commit, Go toolchain, podman
# and CA bundle build the same image ID.
#
# usage: deploy/image/build.sh [TAG]
#   TAG      default localhost/sluice:VERSION, VERSION from internal/app/cli/version.go
#   PODMAN   the podman command with its global flags (default: podman), e.g.
#            "podman --root DIR --runroot DIR" for a storage of its own
# It prints the image ID and size last.
set -euo pipefail
cd "$(dirname "$0")/../.."

version=$(sed -n 's/^const devVersion = "\(.*\)"$/\1/p' internal/app/cli/version.go)
[ -n "$version" ] || { echo "build.sh: no devVersion in internal/app/cli/version.go" >&2; exit 1; }
tag=${1:-localhost/sluice:$version}
read -ra podman <<<"${PODMAN:-podman}"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# The VCS stamp that sluice version prints, given with -ldflags since
# Go stamps none under -buildvcs=false or in a git worktree; the
# image's time is the commit's, so that it is the same at every build.
cli=github.com/sluicehq/sluice/internal/app/cli
ldflags="-s -w"
epoch=${SOURCE_DATE_EPOCH:-0}
if rev=$(git rev-parse HEAD 2>/dev/null); then
	modified=false
	[ -z "$(git status --porcelain --untracked-files=no)" ] || modified=true
	vcstime=$(TZ=UTC0 git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)
	ldflags+=" -X $cli.vcsRevision=$rev -X $cli.vcsTime=$vcstime -X $cli.vcsModified=$modified"
	epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
fi
# Static (no cgo: the image has no libc), without this machine's paths
# (-trimpath) or Go's own VCS stamp, without symbols (-s -w: a third
# smaller; panics still print their stacks).
CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$ctx/sluice" ./cmd/sluice

install -m 0644 /etc/ssl/certs/ca-certificates.crt deploy/image/passwd deploy/image/group "$ctx/"
install -m 0644 internal/app/server/example.yaml "$ctx/sluice.yaml"
chmod 0755 "$ctx/sluice"

# --timestamp sets the image's time and its files' times; without the
# identity label the image does not name the builder's version.
"${podman[@]}" build --quiet --timestamp "$epoch" --identity-label=false \
	-f deploy/image/Containerfile -t "$tag" "$ctx" >/dev/null
"${podman[@]}" image inspect --format "$tag {{.Id}} {{.Size}} bytes" "$tag"
