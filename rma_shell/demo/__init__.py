"""``rma demo``: a real agent run on a bundled dataset, offline by default.

The Local provider and the session shell drive an agent loop over three small tools
(``tools``: read a CSV, summarize a column, write a Markdown report). The model is the
bundled rehearsal model (``rehearsal``: scripted, deterministic, no network or key) or any
OpenAI-compatible endpoint. This package is the demo and its pieces, not library API.
"""

from rma_shell.demo.display import Display
from rma_shell.demo.rehearsal import MODEL_NAME, RehearsalModel
from rma_shell.demo.runner import DemoConfig, DemoHandler, DemoRun, report, run_demo
from rma_shell.demo.tools import TOOL_SPECS, DemoTools, ToolError

__all__ = [
    "MODEL_NAME",
    "TOOL_SPECS",
    "DemoConfig",
    "DemoHandler",
    "DemoRun",
    "DemoTools",
    "Display",
    "RehearsalModel",
    "ToolError",
    "report",
    "run_demo",
]
