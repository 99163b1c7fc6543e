from pmctl.cli import main

main()
