from bridges.echo import main

main()
