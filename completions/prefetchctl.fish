# fish completion for prefetchctl (installed as fish/vendor_completions.d/prefetchctl.fish)

set -l verbs get queue demote promote cancel evict info status list formats metrics watch ping

complete -c prefetchctl -f
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -l socket -r -F -d 'The daemon socket'
complete -c prefetchctl -l json -d 'Machine-readable output'
complete -c prefetchctl -s h -l help -d 'Help'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -l version -d 'Print the version'

complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a get -d 'Fetch urgently, wait, print the cached path'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a queue -d 'Fetch later, in the background lane'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a demote -d 'Urgent work becomes background work'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a promote -d 'Background work becomes urgent'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a cancel -d 'Drop the task'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a evict -d 'Delete cached files'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a info -d 'What the daemon knows about a URL'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a status -d 'Lanes, cache, counters'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a list -d 'Tasks in memory'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a formats -d 'Image formats and which are allowed'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a metrics -d 'Metrics in the Prometheus text format'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a watch -d 'Live view of the lanes and transfers'
complete -c prefetchctl -n "not __fish_seen_subcommand_from $verbs" -a ping -d 'Is the daemon there?'

complete -c prefetchctl -n "__fish_seen_subcommand_from get queue" -l timeout -x -d 'Stop waiting after SEC seconds'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l max-stale -x -d 'Answer from an entry stale by at most SEC seconds'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l offline -d 'Answer only from the cache'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -s o -l output -r -F -d 'Write the content to FILE, - for stdout'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l size -x -d 'A resized variant, WxH'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l fit -x -a 'contain cover fill' -d 'How to fit the size'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l format -x -a 'jpeg png' -d 'Variant format'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l quality -x -d 'JPEG quality 1-100'
complete -c prefetchctl -n "__fish_seen_subcommand_from get" -l upscale -d 'Allow a variant larger than the original'
complete -c prefetchctl -n "__fish_seen_subcommand_from queue" -l wait -d 'Wait until every URL is fetched or failed'
complete -c prefetchctl -n "__fish_seen_subcommand_from evict" -l all -d 'Every entry'
complete -c prefetchctl -n "__fish_seen_subcommand_from list" -l limit -x -d 'At most N tasks'
