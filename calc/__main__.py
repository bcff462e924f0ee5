from calc.cli import main

raise SystemExit(main())
