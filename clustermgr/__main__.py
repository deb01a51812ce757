from clustermgr.cli.main import main

main()
