"""sandgym environments: sandboxes, images, tasks, the env core and the task families."""
