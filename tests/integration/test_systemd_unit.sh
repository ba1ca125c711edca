#!/bin/sh
# test_systemd_unit.sh: deploy/distird.service is a valid unit whose sandbox
# systemd rates at an exposure of at most 2.0 ("OK"; the unit without its
# sandbox rated 6.9), checked offline by `systemd-analyze security`.
. tests/integration/lib.sh

U=deploy/distird.service
systemd-analyze security --offline=true --threshold=20 "$U" >"$TMP/sec.txt" 2>&1
check "systemd-analyze security: exposure at most 2.0 ($(sed -n 's/.*Overall exposure level for [^:]*: //p' "$TMP/sec.txt"))" [ $? -eq 0 ]
for key in CapabilityBoundingSet= SystemCallFilter=@system-service RestrictNamespaces=yes \
    MemoryDenyWriteExecute=yes MemoryMax= TasksMax= NoNewPrivileges=yes; do
    check "the unit sets $key" grep -q "^$key" "$U"
done
finish
