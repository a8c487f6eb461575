"""Small StreamTasks and helpers the runtime tests run as real `millpond run` processes."""
