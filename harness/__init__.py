"""The sandgym harness: runner, trajectory store, results, analyses and the `sandgym` CLI."""
