#!/usr/bin/env bash
# Reading a TFRecord dataset many times larger than the input pipeline's buffers keeps the peak
# resident set bounded: bv:tfrecord reads each record when a worker processes it, and the
# allocator reuses the pages that the records already read have freed. The data: 300 MB of
# records, each a 100 KB bytes feature and a label (scripts/tfrecord_rss.lua write, into a
# temporary directory removed after), read in a fresh process through bv.data.inference with
# batches of 64 and 4 workers: about 26 MB of batches in flight (2 prefetched, the one being
# gathered, its stacked copy). Measured: the peak grows by about 65 MB while reading. Before
# bindings/malloc_conf.cpp set lg_extent_max_active_fit, jemalloc merged the freed records into
# free blocks too large to be split for the next ones, and the peak grew by about 1.8 times the
# data read (+550 MB here); MALLOC_CONF=lg_extent_max_active_fit:6 (jemalloc's default) brings
# that back, and this test fails under it. About 6 s on 2 cores.
# Usage: tfrecord_memory_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: tfrecord_memory_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { cat "$TMP/out" 2>/dev/null; echo "FAIL: $*"; exit 1; }

MB=300
LIMIT_MB=150  # bound on the peak's growth: half the data read, twice what is measured
"$BVLUA" run scripts/tfrecord_rss.lua write $MB "$TMP/data" >"$TMP/out" 2>&1 \
  || fail "writing the shards exited with $?"
"$BVLUA" run scripts/tfrecord_rss.lua read "$TMP/data" 64 4 >>"$TMP/out" 2>&1 \
  || fail "reading the shards exited with $?"

written=$(sed -n 's/^wrote \([0-9]*\) records.*/\1/p' "$TMP/out")
read=$(sed -n 's/^read \([0-9]*\) records.*/\1/p' "$TMP/out")
[ -n "$written" ] && [ "$written" -gt 0 ] || fail "no 'wrote N records' line"
[ "$read" = "$written" ] || fail "read ${read:-?} records of the $written written"

growth=$(sed -n 's/^peak RSS: .*(+\([0-9]*\)\.[0-9] MB).*/\1/p' "$TMP/out")
[ -n "$growth" ] || fail "no 'peak RSS: ... (+N MB)' line"
[ "$growth" -lt $LIMIT_MB ] \
  || fail "the peak RSS grew by $growth MB while reading $MB MB, more than $LIMIT_MB MB: memory" \
          "grows with the data read (records kept, or freed pages not reused)"
cat "$TMP/out"
echo "tfrecord_memory_test: read $read records ($MB MB); the peak grew by $growth MB" \
     "(limit $LIMIT_MB MB)"
echo "tfrecord_memory_test: all passed"
