"""Where things are, relative to this package: its own data and the source checkout around it.

`PACKAGE_DIR` and `TEMPLATES_DIR` hold files shipped with the package (the executable bundles
them too). `PACKAGE_PARENT` is what a child Python process needs on PYTHONPATH to import
this package. The rest name directories of the source checkout (`REPO_ROOT`); they exist
only when the package runs from one (an editable install), so their users check and say so.
"""

from __future__ import annotations

from pathlib import Path

#: the cdriver package directory
PACKAGE_DIR = Path(__file__).resolve().parent
#: package data: the controller's and the plugin's templates
TEMPLATES_DIR = PACKAGE_DIR / "templates"
#: the directory holding the package (the PYTHONPATH entry of child processes)
PACKAGE_PARENT = PACKAGE_DIR.parent

#: the source checkout this package runs from
REPO_ROOT = PACKAGE_PARENT
#: the Helm chart and its CRDs
CHART_DIR = REPO_ROOT / "helm" / "cdriver"
CRD_DIR = CHART_DIR / "crds"
#: development tools: control-plane build (`kube/`), upstream builds (`peer/`, `peer-checkpoint/`)
HACK_DIR = REPO_ROOT / "hack"
