#!/usr/bin/env bash
# Java BookKeeper's own shell (org.apache.bookkeeper.bookie.BookieShell, from Maven Central)
# against a ZooKeeper cluster written by Folio's zk:// driver, and back: Folio reads what the
# Java shell writes. Needs java, mvn (first run only: downloads bookkeeper-server and its
# dependencies into $FOLIO_BK_JARS), and the Debian zookeeper package.
#
#   crates/folio-metadata-zk/interop/java-shell-check.sh
#
# Exits non-zero, naming the failed check, if Java and Folio disagree.
set -euo pipefail
cd "$(dirname "$0")/../../.."

BK_VERSION=${BK_VERSION:-4.17.1}
JARS=${FOLIO_BK_JARS:-$HOME/.cache/folio/bookkeeper-$BK_VERSION}
if ! ls "$JARS"/bookkeeper-server-*.jar >/dev/null 2>&1; then
  pom=$(mktemp -d)
  cat > "$pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>folio</groupId><artifactId>bk-interop</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.bookkeeper</groupId>
<artifactId>bookkeeper-server</artifactId><version>$BK_VERSION</version></dependency></dependencies></project>
POM
  mvn -q -B -f "$pom/pom.xml" dependency:copy-dependencies -DoutputDirectory="$JARS"
  rm -rf "$pom"
fi

cargo build -q -p folio-metadata-zk --example zk_interop_fixture
FIXTURE=${CARGO_TARGET_DIR:-target}/debug/examples/zk_interop_fixture

WORK=$(mktemp -d)
ZK_PID=""; FIX_PID=""; HOLD_PID=""
cleanup() {
  for p in $FIX_PID $HOLD_PID $ZK_PID; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$WORK/zk"
cat > "$WORK/zoo.cfg" <<CFG
tickTime=2000
dataDir=$WORK/zk
clientPort=$PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
java -Xmx256m -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$WORK/zoo.cfg" > "$WORK/zk.out" 2>&1 < /dev/null &
ZK_PID=$!
for _ in $(seq 1 600); do
  # srvr answers "Mode: standalone" only once the server is serving.
  (exec 3<>/dev/tcp/127.0.0.1/$PORT && printf srvr >&3 && timeout 1 cat <&3) 2>/dev/null | grep -q '^Mode: standalone' && break
  sleep 0.1
done

URI="zk://127.0.0.1:$PORT/ledgers"
mkfifo "$WORK/hold"
sleep 100000 > "$WORK/hold" &
HOLD_PID=$!
"$FIXTURE" populate "$URI" < "$WORK/hold" > "$WORK/fixture.out" 2>&1 &
FIX_PID=$!
for _ in $(seq 1 600); do grep -q '^ready' "$WORK/fixture.out" && break; sleep 0.1; done
grep -q '^ready' "$WORK/fixture.out" || { cat "$WORK/fixture.out"; echo "FAIL: fixture not ready"; exit 1; }
LEDGER=$(sed -n 's/^ledger //p' "$WORK/fixture.out")

shell() { # conf-file args... -> output
  local conf=$1; shift
  timeout 120 java -cp "$JARS/*" org.apache.bookkeeper.bookie.BookieShell -conf "$conf" "$@" 2>&1
}
printf 'metadataServiceUri=%s\n' "$URI" > "$WORK/bk.conf"
expect() { # description pattern command...
  local what=$1 pattern=$2; shift 2
  local out; out=$(shell "$WORK/bk.conf" "$@" || true)
  if grep -qF -- "$pattern" <<<"$out"; then echo "ok: $what"; else
    echo "$out" | tail -20; echo "FAIL: $what (expected '$pattern')"; exit 1; fi
}
expect "listbookies -rw sees Folio's writable bookie" "BookieID:127.0.0.1:3181" listbookies -rw
expect "listbookies -ro sees Folio's read-only bookie" "BookieID:127.0.0.1:3182" listbookies -ro
expect "listledgers sees the long-id ledger" "ledgerID: 2147483650" listledgers
expect "ledgermetadata decodes Folio's record" "state=CLOSED, length=100, lastEntryId=9, digestType=CRC32C" ledgermetadata -l "$LEDGER"
expect "listunderreplicated sees the mark" "MissingReplica : 127.0.0.1:3182" listunderreplicated -printmissingreplica
expect "whoisauditor sees Folio's Auditor" "Auditor: 127.0.0.1:3181" whoisauditor
expect "lostbookierecoverydelay reads Folio's value" "LostBookieRecoveryDelay value in ZK: 17" lostbookierecoverydelay -get
expect "cookie_get reads Folio's cookie" 'bookieHost: "127.0.0.1:3181"' cookie_get 127.0.0.1:3181
expect "whatisinstanceid" "InstanceId:" whatisinstanceid

# And back: Java writes, Folio reads.
expect "Java disables autorecovery" "disabled" autorecovery -disable
expect "Java sets the delay" "Successfully set LostBookieRecoveryDelay value in ZK: 5" lostbookierecoverydelay -set 5
printf 'metadataServiceUri=zk://127.0.0.1:%s/javacluster\n' "$PORT" > "$WORK/bk2.conf"
shell "$WORK/bk2.conf" initnewcluster | grep -q "Successfully initiated cluster" || { echo "FAIL: Java initnewcluster"; exit 1; }
"$FIXTURE" check-java-writes "$URI" "zk://127.0.0.1:$PORT/javacluster"
echo "java-shell-check: all checks passed (BookKeeper $BK_VERSION)"
