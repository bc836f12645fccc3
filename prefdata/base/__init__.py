"""Shared tools every layer may use, importing nothing else of prefdata.

    errors      errors a user can act on (one line, an exit code)
    outputs     output paths checked before any work
    scratch     private temporary folders, swept after a killed run
    processes   servers a command starts die with it; a stopped command ends in seconds
    allocator   the bulk data commands keep freed memory for reuse (fewer page faults)
    progress    per-stage progress of a flow run, and how a command draws it
    specs       the one syntax of judges, scorers and verifiers ("llm:PATH", "rm:PATH", "rule:NAME")
    verdicts    the one rule from a pair of scores to a verdict (higher wins; equal, NaN or an error: undecided)
    targets     the one loader of "module:function" targets (called only by registry)
    registry    what a spec, a config or a run's parameters may name: registered verifiers, repairs,
                evaluators, judge backends, checks and trainers; the paths, servers and variables a
                deployment's run may reach
    yamlkeys    YAML as every file the project reads takes it (a key given twice refused)
    files       a file opened only when it is a regular file, read with a bound (store files, side inputs)
    defaults    defaults the command line shares with modules too heavy for `--help` (batch rows, ...)

May import: nothing of prefdata.
"""
