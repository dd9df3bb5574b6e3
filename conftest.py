"""Root pytest set-up for `make test`: every notebook cell nbval runs is checked for alarm lines."""
pytest_plugins = ["tools.nbval_alarms"]
