"""Runs a notebook in a real Jupyter kernel (ipykernel, driven by nbclient), headless, and prints
each code cell's outputs as JSON: [[cell source, [stream, error or display text, ...]], ...]
(a display's HTML follows its text, after a line "<html output>").

    python run.py NOTEBOOK.json

NOTEBOOK.json is a list of cell sources. The kernel is this interpreter's (ipykernel's native
kernel); it finds `tidemark` and the collector through PYTHONPATH and TIDEMARK_COLLECTOR.
"""
import json
import sys

import nbformat
from nbclient import NotebookClient

sources = json.load(open(sys.argv[1]))
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
result = []
for cell in nb.cells:
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(output["text"])
        elif output.get("output_type") == "error":
            texts.append(f"{output['ename']}: {output['evalue']}")
        elif output.get("output_type") in ("display_data", "execute_result"):
            data = output.get("data", {})
            texts.append(data.get("text/plain", ""))
            if "text/html" in data:
                texts.append("\n<html output>" + data["text/html"])
    result.append([cell.source, texts])
print(json.dumps(result))
