#compdef taskq

_taskq_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _TASKQ_COMPLETE=complete_zsh taskq)
}

compdef _taskq_completion taskq
