"""`python -m devtools.gpu_check` (what scripts/gpu_check.sh runs): see `devtools.gpu_check.runner`."""

from devtools.gpu_check.runner import main

raise SystemExit(main())
