from hookrelay.service.cli import main

raise SystemExit(main())
