"""effir.compile: the program through the pipeline, specialised, built and
cached (the only part, with runtime/, imported from outside the backend)."""
