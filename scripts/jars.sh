#!/usr/bin/env bash
# Fetch the Java libraries (jars) that Spark needs for the table formats and warehouses beyond plain
# Parquet on a local file system into a folder that mqbridge hands to Spark (`[spark] jars_dir`,
# default: the folder `jars` of this project).
#
#   scripts/jars.sh [--dir DIR] [SET ...]     SET: delta (default), iceberg, s3, hdfs-test, iceberg-rest-test, all
#
# delta is what a user's install fetches too: `mqbridge jars` (mqbridge.landing.jar_sets pins it, Delta
# Lake 4.4.0 for the Spark 4.1 that pyproject.toml pins), run here from the venv. The test sets are fixed
# lists of Maven coordinates below, fetched with the machine's Maven client without their dependencies
# except where a coordinate ends in "+": Spark already ships Scala, Hadoop's client, Parquet and Jackson,
# and a second copy of those on the class path breaks it. Spark 4.1 ships Hadoop 3.4.2, so hadoop-aws is
# 3.4.2 too.
# A host without internet: run this on one that has it and copy the folder (its files are plain jars).
set -euo pipefail
cd "$(dirname "$0")/.."

dir="jars"
sets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir="$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) sets+=("$1"); shift ;;
    esac
done
[ ${#sets[@]} -gt 0 ] || sets=(delta)

coordinates() {
    case "$1" in
        s3) echo "${S3_COORDINATES:-}" ;;
        hdfs-test) echo "${HDFS_TEST_COORDINATES:-}" ;;
        iceberg-rest-test) echo "${ICEBERG_REST_TEST_COORDINATES:-}" ;;
        *) echo "jars.sh: unknown set '$1' (delta, iceberg, s3, hdfs-test, iceberg-rest-test, all)" >&2; exit 2 ;;
    esac
}
# s3: S3A (hadoop-aws 3.4.2) and the parts of the AWS SDK v2 it loads, at the versions its pom names
# (SDK 2.29.52, analytics accelerator 1.2.1). Not the SDK's `bundle` (686 MB, copied into every
# session's scratch space: +5 s per session start) but its modules (12 MB) without their own Netty,
# Apache HttpClient, commons-codec/-logging and SLF4J: Spark ships newer ones (Netty 4.2.7, HttpClient
# 4.5.14), and S3A reads, writes, renames (the transfer manager's async copy) and Delta commits work on
# them (tests/integration/test_object_store_facts.py).
S3_SDK_MODULES="annotations apache-client arns auth aws-core aws-query-protocol aws-xml-protocol checksums
    checksums-spi crt-core endpoints-spi http-auth http-auth-aws http-auth-aws-eventstream http-auth-spi
    http-client-spi identity-spi json-utils metrics-spi netty-nio-client profiles protocol-core regions
    retries retries-spi s3 s3-transfer-manager sdk-core third-party-jackson-core utils"
S3_COORDINATES="org.apache.hadoop:hadoop-aws:3.4.2
    software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.2.1
    software.amazon.eventstream:eventstream:1.0.1 org.reactivestreams:reactive-streams:1.0.4
    $(for m in $S3_SDK_MODULES; do printf 'software.amazon.awssdk:%s:2.29.52 ' "$m"; done)"
# hdfs-test: Hadoop's mini cluster (one shaded jar; its other classes come from Spark's
# hadoop-client-api/-runtime) that scripts/hdfs.sh starts for the tests of hdfs:// warehouses.
HDFS_TEST_COORDINATES="org.apache.hadoop:hadoop-client-minicluster:3.4.2"
# iceberg-rest-test: Apache Iceberg's own REST catalog server (`RESTCatalogServer`, the test fixture that
# the project's `apache/iceberg-rest-fixture` image runs: a JDBC catalog behind the REST protocol), which
# tests/support/iceberg_rest.py starts for the tests of `[spark.iceberg] catalog = "rest"`. 1.10.0 is the
# newest release whose test-fixtures jar Maven Central serves here (1.12.0's is refused); the REST protocol
# is versioned apart from the library, and the bridge's 1.12 runtime speaks it. With their dependencies
# (Jetty 11, SQLite's JDBC driver, Hadoop's client for the server's HadoopFileIO): a server of its own, not
# on Spark's class path.
ICEBERG_REST_TEST_COORDINATES="org.apache.iceberg:iceberg-open-api:1.10.0:test-fixtures+
    org.apache.iceberg:iceberg-core:1.10.0:tests+ org.apache.iceberg:iceberg-core:1.10.0+
    org.eclipse.jetty:jetty-servlet:11.0.24+ org.xerial:sqlite-jdbc:3.46.1.3+
    org.apache.hadoop:hadoop-client-api:3.4.2+ org.apache.hadoop:hadoop-client-runtime:3.4.2+
    org.slf4j:slf4j-simple:2.0.16+"

if ! command -v mvn >/dev/null 2>&1; then
    echo "jars.sh: installing maven (apt-get)"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq maven >/dev/null
fi

fetch_set() {
    local name="$1" target="$dir/$1" work coords
    if [ "$name" = delta ] || [ "$name" = iceberg ]; then  # pinned in mqbridge.landing.jar_sets, fetched as a user's install does
        .venv/bin/python -m mqbridge jars --dir "$dir" "$name"
        return
    fi
    coords="$(coordinates "$name")"
    [ -n "$coords" ] || { echo "jars.sh: set $name is empty"; return 0; }
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' RETURN
    {
        echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        echo "<groupId>mqbridge.jars</groupId><artifactId>$name</artifactId><version>1</version><dependencies>"
        for c in $coords; do
            local transitive=false
            case "$c" in *+) transitive=true; c="${c%+}" ;; esac
            IFS=: read -r g a v classifier <<<"$c"
            echo "<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version>"
            [ -z "$classifier" ] || echo "<classifier>$classifier</classifier>"
            $transitive || echo "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
            echo "</dependency>"
        done
        echo '</dependencies></project>'
    } > "$work/pom.xml"
    mkdir -p "$target.new"
    if ! mvn -q -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory="$(realpath "$target.new")" >"$work/mvn.log" 2>&1; then
        cat "$work/mvn.log" >&2
        rm -rf "$target.new"
        echo "jars.sh: could not fetch the $name jars ($coords)" >&2
        return 1
    fi
    rm -rf "$target"
    mv "$target.new" "$target"
    echo "jars.sh: $name -> $target ($(ls "$target" | wc -l) jars)"
}

for s in "${sets[@]}"; do
    if [ "$s" = all ]; then
        for t in delta iceberg s3 hdfs-test iceberg-rest-test; do fetch_set "$t"; done
    else
        fetch_set "$s"
    fi
done
