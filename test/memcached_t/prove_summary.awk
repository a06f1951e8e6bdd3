# Summarises one `prove -v` log for run.sh: prints "ran|failed|failed test ranges|notes".
/^Files=[0-9]+, Tests=[0-9]+/ { sub(/^Files=[0-9]+, Tests=/, ""); sub(/,.*/, ""); ran = $0 }
/^Test Summary Report/ { rep = 1; next }
rep && /\(Wstat: .* Tests: [0-9]+ Failed: [0-9]+\)/ {
    s = $0; sub(/.*Failed: /, "", s); sub(/\).*/, "", s); failed = s; next }
rep && /^  Failed tests?: / { inlist = 1; sub(/^  Failed tests?: +/, ""); list = $0; next }
rep && inlist && /^   +[0-9]/ { gsub(/^ +/, ""); list = list ", " $0; next }
rep && /^  / { inlist = 0 }
rep && /^  Parse errors: / { sub(/^  Parse errors: /, ""); note = note $0 " " }
!rep && /^# Looks like your test exited with [0-9]+ just after/ { died = $0 }
!rep && /^[^#ok ].* at t\/[^ ]+ line [0-9]+\.$/ && !diemsg { diemsg = $0 }
END {
    gsub(/  +/, " ", list); gsub(/,  */, ", ", list)
    if (diemsg != "") note = note "died: " diemsg
    printf "%s|%s|%s|%s\n", ran, failed + 0, list, note
}
