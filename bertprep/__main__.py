from bertprep.cli import main

raise SystemExit(main())
