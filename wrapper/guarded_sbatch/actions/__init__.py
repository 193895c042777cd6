"""What the sidecar does on STOP: stop the run, save evidence, append a project note."""
