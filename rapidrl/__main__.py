from rapidrl.cli import main

raise SystemExit(main())
