# bash completion for prefetchctl (installed as bash-completion/completions/prefetchctl)

_prefetchctl() {
    local cur prev verb i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    local verbs="get queue demote promote cancel evict info status list formats metrics watch view ping"

    verb=
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --socket|-o|--output|--timeout|--max-stale|--size|--fit|--format|--quality|--limit|--ahead|--behind) ((i++)) ;;
            -*) ;;
            *) verb=${COMP_WORDS[i]}; break ;;
        esac
    done

    case $prev in
        --socket|-o|--output)
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --fit)
            COMPREPLY=($(compgen -W "contain cover fill" -- "$cur")); return ;;
        --format)
            COMPREPLY=($(compgen -W "jpeg png" -- "$cur")); return ;;
        --timeout|--max-stale|--size|--quality|--limit|--ahead|--behind)
            return ;;
    esac

    # What every verb takes, then each verb's own (its --help names them).
    local flags="--socket --json --help --version"
    case $verb in
        "") if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$flags --timeout" -- "$cur"))
            else COMPREPLY=($(compgen -W "$verbs" -- "$cur")); fi
            return ;;
        get) flags+=" --timeout --max-stale --offline -o --output --size --fit --format --quality --upscale" ;;
        queue) flags+=" --now --wait --timeout" ;;
        evict) flags+=" --all --timeout" ;;
        demote|promote|cancel) flags+=" --timeout" ;;
        list) flags+=" --limit --timeout" ;;
        info|status|formats|metrics|ping) flags+=" --timeout" ;;
        view) flags+=" --ahead --behind --size --fit --format --quality --upscale" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ $cur == "" && $verb =~ ^(get|queue|demote|promote|cancel|evict)$ ]]; then
        COMPREPLY=(-)
    elif [[ $verb == view ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        if [[ $cur == "" ]]; then COMPREPLY+=(-); fi
    fi
}

complete -F _prefetchctl prefetchctl
