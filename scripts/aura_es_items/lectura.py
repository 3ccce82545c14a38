"""Reading comprehension items of the aura-es suite: original passages written for Aura.

Each passage has four questions; each question is (question, correct answer, three distractors). The
distractors are plausible in the passage's world but contradicted or not supported by it.
"""

PASSAGES = [
    (
        "Marta abrió su panadería en Zaragoza hace doce años. Cada mañana se levanta a las cuatro para "
        "encender el horno de leña, que heredó de su abuelo. Los sábados prepara trenzas de almendra, que se "
        "agotan antes del mediodía. Su hijo Pablo la ayuda durante las vacaciones de verano.",
        [
            ("¿En qué ciudad está la panadería?", "Zaragoza", "Huesca", "Teruel", "Pamplona"),
            ("¿De quién heredó Marta el horno?", "De su abuelo", "De su padre", "De una vecina", "De su hijo"),
            (
                "¿Qué prepara Marta los sábados?",
                "Trenzas de almendra",
                "Pan de centeno con nueces",
                "Rosquillas de anís",
                "Empanadas de atún",
            ),
            (
                "¿Cuándo ayuda Pablo en la panadería?",
                "En las vacaciones de verano",
                "Todos los sábados",
                "Cada mañana a las cuatro, antes de clase",
                "Solo en Navidad",
            ),
        ],
    ),
    (
        "El río que cruza el pueblo de Valdemora se secó por completo durante el verano pasado. Los "
        "agricultores tuvieron que regar con agua de un pozo comunitario, y el ayuntamiento prohibió llenar "
        "las piscinas privadas. En octubre volvieron las lluvias y el cauce recuperó su caudal en pocas semanas.",
        [
            ("¿Qué le pasó al río el verano pasado?", "Se secó", "Se desbordó", "Se congeló", "Cambió de cauce"),
            (
                "¿De dónde sacaron el agua los agricultores?",
                "De un pozo comunitario",
                "De un embalse cercano",
                "De camiones cisterna enviados por la provincia",
                "Del río vecino",
            ),
            (
                "¿Qué prohibió el ayuntamiento?",
                "Llenar las piscinas privadas",
                "Regar los campos de noche y los fines de semana",
                "Pescar en el río",
                "Lavar los coches",
            ),
            ("¿Cuándo volvieron las lluvias?", "En octubre", "En agosto", "En diciembre", "En primavera"),
        ],
    ),
    (
        "Lucía estudia Medicina en Salamanca, pero nació en Montevideo. Vive en un piso compartido con dos "
        "compañeras: una es de Lugo y la otra de Cádiz. Los domingos cocina para las tres, casi siempre "
        "milanesas con puré, porque le recuerdan a su casa.",
        [
            ("¿Qué estudia Lucía?", "Medicina", "Derecho", "Farmacia", "Enfermería"),
            ("¿Dónde nació Lucía?", "En Montevideo", "En Salamanca", "En Buenos Aires", "En Lugo"),
            ("¿Con cuántas personas comparte piso?", "Con dos", "Con una", "Con tres", "Con cuatro"),
            (
                "¿Por qué cocina milanesas con puré?",
                "Porque le recuerdan a su casa",
                "Porque son baratas",
                "Porque se lo piden sus compañeras",
                "Porque es lo único que sabe cocinar",
            ),
        ],
    ),
    (
        "La biblioteca municipal de Santa Inés cerrará en agosto para cambiar el tejado, que tiene goteras "
        "desde el invierno. Mientras duren las obras, los libros prestados podrán devolverse en el centro "
        "cívico de la plaza Mayor. La reapertura está prevista para el quince de septiembre.",
        [
            (
                "¿Por qué cierra la biblioteca?",
                "Para cambiar el tejado",
                "Por falta de personal",
                "Por vacaciones del personal",
                "Para pintar las paredes",
            ),
            (
                "¿Desde cuándo tiene goteras el tejado?",
                "Desde el invierno",
                "Desde el verano",
                "Desde hace diez años",
                "Desde la primavera",
            ),
            (
                "¿Dónde se devuelven los libros durante las obras?",
                "En el centro cívico de la plaza Mayor",
                "En el ayuntamiento",
                "En la escuela del barrio",
                "En la oficina de correos de la calle Ancha",
            ),
            (
                "¿Cuándo está prevista la reapertura?",
                "El quince de septiembre",
                "El uno de agosto",
                "El quince de agosto, antes de las fiestas",
                "El uno de octubre",
            ),
        ],
    ),
    (
        "Don Ernesto tiene ochenta años y sale a caminar todas las tardes por el paseo marítimo de Alicante. "
        "Lleva siempre una gorra azul y un bastón de madera que él mismo talló. Dice que el secreto de su "
        "buena salud es no tener prisa y dormir la siesta.",
        [
            ("¿Cuántos años tiene don Ernesto?", "Ochenta", "Setenta", "Noventa", "Sesenta"),
            (
                "¿Por dónde camina?",
                "Por el paseo marítimo",
                "Por el parque central",
                "Por la sierra",
                "Por el casco antiguo",
            ),
            ("¿Quién talló el bastón?", "Él mismo", "Su nieto", "Un artesano de Alicante", "Su mujer"),
            (
                "Según él, ¿cuál es el secreto de su salud?",
                "No tener prisa y dormir la siesta",
                "Comer mucho pescado",
                "Caminar por la mañana temprano, antes del desayuno",
                "No salir nunca de casa",
            ),
        ],
    ),
    (
        "En la escuela de Villanueva, los alumnos de sexto plantaron un huerto en el patio. Sembraron "
        "tomates, lechugas y calabacines, y se turnan para regarlo en grupos de tres. La primera cosecha la "
        "donaron al comedor del barrio.",
        [
            (
                "¿Quiénes plantaron el huerto?",
                "Los alumnos de sexto",
                "Los profesores",
                "Las familias",
                "Los alumnos de primero",
            ),
            (
                "¿Dónde está el huerto?",
                "En el patio de la escuela",
                "En un terreno municipal",
                "En la azotea",
                "Junto al río",
            ),
            (
                "¿Cómo se organizan para regarlo?",
                "Por turnos, en grupos de tres",
                "Lo riega el conserje",
                "Tiene riego automático",
                "Lo riegan todos juntos los lunes",
            ),
            (
                "¿Qué hicieron con la primera cosecha?",
                "La donaron al comedor del barrio",
                "La vendieron en el mercado",
                "Se la llevaron a casa",
                "La usaron en el comedor escolar",
            ),
        ],
    ),
    (
        "El tren de las ocho salió con cuarenta minutos de retraso porque una vaca se había quedado dormida "
        "sobre la vía. El maquinista tuvo que esperar a que el ganadero llegara para apartarla. Los viajeros, "
        "lejos de enfadarse, sacaron fotos desde las ventanillas.",
        [
            ("¿Cuánto retraso tuvo el tren?", "Cuarenta minutos", "Ocho minutos", "Una hora", "Cuatro minutos"),
            (
                "¿Qué causó el retraso?",
                "Una vaca dormida en la vía",
                "Una avería del motor",
                "Una huelga de maquinistas",
                "La nieve acumulada",
            ),
            ("¿Quién apartó al animal?", "El ganadero", "El maquinista", "Los viajeros", "Un policía"),
            (
                "¿Cómo reaccionaron los viajeros?",
                "Sacaron fotos",
                "Se quejaron al revisor",
                "Bajaron del tren",
                "Pidieron la devolución del billete",
            ),
        ],
    ),
    (
        "Carmen trabaja como guía en el museo de cerámica de Talavera. Explica a los visitantes que los "
        "azulejos se pintan a mano antes de la segunda cocción. Su pieza favorita es un plato del siglo XVII "
        "con un ciervo, que encontraron roto en cuatro pedazos y restauraron en 2019.",
        [
            (
                "¿Dónde trabaja Carmen?",
                "En un museo de cerámica",
                "En una fábrica de azulejos",
                "En una tienda de recuerdos",
                "En una escuela de arte",
            ),
            (
                "¿Cuándo se pintan los azulejos?",
                "Antes de la segunda cocción",
                "Después de la segunda cocción",
                "Antes de la primera cocción",
                "Cuando ya están fríos y vendidos",
            ),
            ("¿Qué animal aparece en su pieza favorita?", "Un ciervo", "Un caballo", "Un toro", "Un águila"),
            ("¿En cuántos pedazos encontraron el plato?", "En cuatro", "En dos", "En siete", "En doce"),
        ],
    ),
    (
        "Tras jubilarse, Rosa se apuntó a clases de guitarra en el centro de mayores. Al principio le dolían "
        "los dedos y pensó en dejarlo, pero su profesor le recomendó practicar solo quince minutos al día. "
        "Un año después tocó en la fiesta del barrio delante de sus nietos.",
        [
            ("¿Qué instrumento aprendió Rosa?", "La guitarra", "El piano", "El violín", "La flauta"),
            (
                "¿Por qué pensó en dejarlo?",
                "Porque le dolían los dedos",
                "Porque las clases eran caras",
                "Porque no tenía tiempo",
                "Porque se aburría",
            ),
            (
                "¿Qué le recomendó el profesor?",
                "Practicar quince minutos al día",
                "Practicar dos horas al día",
                "Cambiar de instrumento",
                "Descansar un mes",
            ),
            (
                "¿Dónde tocó un año después?",
                "En la fiesta del barrio",
                "En un teatro de la capital",
                "En la radio local",
                "En la boda de su nieta",
            ),
        ],
    ),
    (
        "La cooperativa de Los Almendros produce aceite de oliva desde 1958. Este año la cosecha fue un "
        "tercio menor que la anterior por culpa de una helada en abril, cuando los olivos estaban en flor. "
        "Aun así, el aceite obtuvo un premio en la feria regional por su sabor afrutado.",
        [
            ("¿Qué produce la cooperativa?", "Aceite de oliva", "Vino tinto", "Almendras tostadas", "Queso"),
            ("¿Desde qué año produce?", "Desde 1958", "Desde 1985", "Desde 1928", "Desde 2008"),
            (
                "¿Por qué fue menor la cosecha?",
                "Por una helada en abril",
                "Por una plaga de insectos",
                "Por falta de trabajadores",
                "Por un incendio en verano",
            ),
            (
                "¿Por qué premiaron el aceite?",
                "Por su sabor afrutado",
                "Por su precio bajo",
                "Por su botella original",
                "Por ser el más antiguo",
            ),
        ],
    ),
    (
        "Andrés y su hermana Noelia recorrieron en bicicleta el Camino de Santiago desde León. Tardaron ocho "
        "días y durmieron en albergues. El tercer día se les pinchó una rueda cerca de Astorga y un "
        "agricultor les prestó un parche y una bomba.",
        [
            ("¿Desde dónde empezaron el Camino?", "Desde León", "Desde Astorga", "Desde Burgos", "Desde Roncesvalles"),
            ("¿Cuántos días tardaron?", "Ocho", "Tres", "Quince", "Cinco"),
            ("¿Dónde durmieron?", "En albergues", "En hoteles", "En una tienda de campaña", "En casa de unos amigos"),
            (
                "¿Quién los ayudó con el pinchazo?",
                "Un agricultor",
                "Otro ciclista",
                "Un mecánico de Astorga",
                "La policía",
            ),
        ],
    ),
    (
        "En el mercado de Coyoacán, doña Guadalupe vende tamales desde hace treinta años. Los de rajas con "
        "queso son los más pedidos, aunque ella prefiere los de dulce. Abre a las siete de la mañana y, "
        "cuando se le acaban, cierra el puesto aunque no sea mediodía.",
        [
            ("¿Qué vende doña Guadalupe?", "Tamales", "Tortillas", "Flores", "Frutas tropicales"),
            ("¿Cuáles son los más pedidos?", "Los de rajas con queso", "Los de dulce", "Los de pollo", "Los de frijol"),
            ("¿Cuáles prefiere ella?", "Los de dulce", "Los de rajas con queso", "Los de pollo", "Los de mole"),
            (
                "¿Cuándo cierra el puesto?",
                "Cuando se le acaban los tamales",
                "Siempre a mediodía",
                "A las siete de la tarde",
                "Cuando llueve",
            ),
        ],
    ),
    (
        "El observatorio del Roque de los Muchachos está en la isla de La Palma, a más de dos mil metros de "
        "altura. Allí el cielo es muy limpio porque las nubes suelen quedarse por debajo de la cumbre. Una ley "
        "protege la oscuridad de la isla: las farolas deben iluminar solo hacia el suelo.",
        [
            ("¿En qué isla está el observatorio?", "En La Palma", "En Tenerife", "En Gran Canaria", "En Mallorca"),
            (
                "¿A qué altura aproximada se encuentra?",
                "A más de dos mil metros",
                "A unos quinientos metros",
                "Al nivel del mar",
                "A más de cinco mil metros",
            ),
            (
                "¿Por qué el cielo es tan limpio allí?",
                "Porque las nubes se quedan por debajo de la cumbre",
                "Porque nunca llueve en la isla",
                "Porque no vive nadie en la isla",
                "Porque sopla mucho viento",
            ),
            (
                "¿Qué exige la ley sobre las farolas?",
                "Que iluminen solo hacia el suelo",
                "Que se apaguen a medianoche en toda la isla",
                "Que sean de color azul",
                "Que estén a más de diez metros",
            ),
        ],
    ),
    (
        "Inés perdió su perro, Canelo, durante una tormenta. Pegó carteles en todo el barrio y avisó a la "
        "protectora de animales. Tres días después la llamó una panadera: Canelo llevaba dos noches durmiendo "
        "en la puerta de su tienda, atraído por el olor del pan.",
        [
            ("¿Cómo se llama el perro?", "Canelo", "Tormenta", "Pan", "Inés"),
            (
                "¿Cuándo se perdió?",
                "Durante una tormenta",
                "Durante un paseo por el campo",
                "En las fiestas del pueblo",
                "Durante una mudanza",
            ),
            (
                "¿Quién llamó a Inés?",
                "Una panadera",
                "La protectora de animales",
                "Un policía",
                "Una vecina del quinto",
            ),
            (
                "¿Qué atraía al perro a la tienda?",
                "El olor del pan",
                "El calor del horno",
                "Otro perro que vivía allí",
                "La comida que le daban los niños",
            ),
        ],
    ),
    (
        "Para celebrar su aniversario, el club de ajedrez de Rosario organizó un torneo abierto. Se "
        "inscribieron ciento veinte jugadores, el más joven de nueve años. Ganó una estudiante de "
        "Matemáticas que no había perdido ninguna partida, y el premio fue un tablero tallado en madera de "
        "algarrobo.",
        [
            (
                "¿Qué celebraba el club?",
                "Su aniversario",
                "La Navidad",
                "La inauguración de su local",
                "El cumpleaños de su presidente",
            ),
            ("¿Cuántos jugadores se inscribieron?", "Ciento veinte", "Doce", "Noventa", "Doscientos"),
            (
                "¿Quién ganó el torneo?",
                "Una estudiante de Matemáticas",
                "El jugador de nueve años",
                "El presidente del club",
                "Un profesor de Física de la universidad local",
            ),
            (
                "¿En qué consistió el premio?",
                "En un tablero tallado en madera",
                "En un viaje a Buenos Aires para dos personas",
                "En una medalla de oro",
                "En un reloj de ajedrez",
            ),
        ],
    ),
]
