"""Root pytest set-up for `make test`: every notebook cell nbval runs is checked for alarm lines."""
import sys
from pathlib import Path

# tests/ is on the path as it is for the tests themselves, so that they and this plugin share one
# module (its record of the notebooks nbval ran).
sys.path.insert(0, str(Path(__file__).parent / "tests"))
pytest_plugins = ["nbval_plugin"]
