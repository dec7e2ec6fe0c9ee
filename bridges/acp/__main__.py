from bridges.acp import main

main()
