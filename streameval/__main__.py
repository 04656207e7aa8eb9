from streameval.cli import main

raise SystemExit(main())
